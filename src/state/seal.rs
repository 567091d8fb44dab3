//! Sealed envelopes: data the server hands to a client and must get back unaltered.
//!
//! `requestState` (MRTR) uses this today; job handles use the same envelope with another
//! [`Purpose`]. The format is versioned and names its key, so keys rotate without breaking
//! envelopes already in flight:
//!
//! ```text
//! v2.<kid>.<base64url(payload)>.<base64url(HMAC-SHA256(key[kid], purpose "\n" len(binding) binding v2.<kid>.<payload>))>
//! payload = {"exp": <unix ms>, "data": <value>}      len(binding) = 8 bytes, big-endian
//! ```
//!
//! The envelope gives integrity, not confidentiality: the client can read `data`, so never
//! put secrets in it. The binding (principal, method, digest of the salient params) is never
//! in the envelope, only in what the MAC covers: the envelope does not reveal whom it belongs
//! to, and one presented by anyone else fails exactly as a forged one does.
//!
//! Envelopes of the first format, `v1`, are still opened until the last of them has expired
//! (the longest-lived, a 2025-11-25 session id, lasts a day): their payload carried the hex
//! SHA-256 of the binding, which made a job handle twice as long. [`SealFormat::V1`]
//! (`MCP_SEAL_FORMAT=v1`) still seals them, for a rolling upgrade from a release that opens only
//! those.
//!
//! ```text
//! v1.<kid>.<base64url(payload)>.<base64url(HMAC-SHA256(key[kid], purpose "\n" v1.<kid>.<payload>))>
//! payload = {"exp": <unix ms>, "bind": "<hex SHA-256 of the binding>", "data": <value>}
//! ```

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::{digest, hmac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

use super::Clock;

/// Longest envelope accepted; larger input is refused before decoding.
pub const MAX_SEALED_LEN: usize = 64 * 1024;
/// Shortest secret accepted (bytes).
pub const MIN_SECRET_LEN: usize = 32;
/// Fewest different bytes a configured secret may have: 32 random bytes, hex or base64 have many
/// more, and a repeated word or character far fewer. Not a measure of entropy; a guard against
/// the secrets anyone would guess first.
const MIN_DISTINCT_SECRET_BYTES: usize = 8;

/// What an envelope is for. Part of the MAC input, so an envelope minted for one purpose is
/// worthless for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// MRTR `requestState`.
    RequestState,
    /// A job handle.
    JobHandle,
    /// A pagination cursor.
    Cursor,
    /// A 2025-11-25 `Mcp-Session-Id`.
    LegacySession,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Self::RequestState => b"mcp.request-state",
            Self::JobHandle => b"mcp.job-handle",
            Self::Cursor => b"mcp.cursor",
            Self::LegacySession => b"mcp.legacy-session",
        }
    }
}

/// Why an envelope was refused. The wire never learns more than "invalid" or "expired".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealError {
    /// Not of the envelope's shape, too long, or not decodable.
    Malformed,
    /// Names a key this deployment does not have.
    UnknownKey,
    /// The MAC does not verify.
    BadSignature,
    /// Authentic but past its expiry.
    Expired,
    /// Authentic but minted for another principal, method or request (a `v1` envelope only: a
    /// later one presented with another binding does not verify).
    WrongBinding,
}

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed",
            Self::UnknownKey => "unknown key",
            Self::BadSignature => "bad signature",
            Self::Expired => "expired",
            Self::WrongBinding => "not valid for this request",
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Payload {
    exp: u64,
    data: Value,
}

/// The `v1` payload.
#[derive(Serialize, Deserialize)]
struct PayloadV1<'a> {
    exp: u64,
    #[serde(borrow)]
    bind: &'a str,
    data: Value,
}

struct SealingKey {
    id: String,
    key: hmac::Key,
}

/// The format a [`Sealer`] seals in; it opens both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SealFormat {
    /// The first format, for the first step of a rolling upgrade from a release that opens only
    /// it: every instance learns to open `v2` while all of them still seal `v1`.
    V1,
    /// The current format.
    #[default]
    V2,
}

impl SealFormat {
    /// What of the binding the MAC covers: all of it from `v2` on; nothing in `v1`, whose
    /// payload names the binding's digest instead.
    fn binding_under_mac(self, binding: &[u8]) -> Option<&[u8]> {
        (self == Self::V2).then_some(binding)
    }
}

/// Seals and opens envelopes with a ring of HMAC-SHA256 keys; the first key seals.
#[derive(Clone)]
pub struct Sealer {
    keys: Arc<[SealingKey]>,
    format: SealFormat,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Sealer").field("key_ids", &ids).finish_non_exhaustive()
    }
}

/// 1-32 characters of `[A-Za-z0-9_-]`.
fn is_key_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Sealer {
    /// Builds a sealer from `(key id, secret)` pairs; the first pair seals, all open.
    ///
    /// Fails on an empty ring, a short secret, a duplicate or ill-formed key id.
    pub fn new(keys: Vec<(String, Vec<u8>)>, clock: Arc<dyn Clock>) -> Result<Self, String> {
        if keys.is_empty() {
            return Err("no sealing key configured".into());
        }
        let mut ring = Vec::with_capacity(keys.len());
        for (id, secret) in keys {
            if !is_key_id(&id) {
                return Err(format!("key id {id:?} must be 1-32 characters of [A-Za-z0-9_-]"));
            }
            if secret.len() < MIN_SECRET_LEN {
                return Err(format!("the secret for key id {id:?} is shorter than {MIN_SECRET_LEN} bytes"));
            }
            if ring.iter().any(|k: &SealingKey| k.id == id) {
                return Err(format!("key id {id:?} appears twice"));
            }
            ring.push(SealingKey { id, key: hmac::Key::new(hmac::HMAC_SHA256, &secret) });
        }
        Ok(Self { keys: ring.into(), format: SealFormat::V2, clock })
    }

    /// Parses `MCP_STATE_SECRET`: comma-separated entries, each `kid=secret` or a bare secret
    /// (whose key id is then derived from its digest). The first entry seals.
    ///
    /// An entry is `kid=secret` only when what comes before its first `=` is a well-formed key id
    /// and what follows is more than base64 padding: a bare base64 secret (`…==`) is never cut
    /// into a "key id" that would be published in every envelope. Errors name entries by
    /// position and never quote any part of the value.
    pub fn from_env_value(raw: &str, clock: Arc<dyn Clock>) -> Result<Self, String> {
        let mut keys: Vec<(String, Vec<u8>)> = Vec::new();
        for (n, entry) in raw.split(',').map(str::trim).filter(|e| !e.is_empty()).enumerate() {
            let (id, secret) = match entry.split_once('=') {
                Some((id, secret)) if is_key_id(id.trim()) && !secret.trim().bytes().all(|b| b == b'=') => {
                    (id.trim().to_owned(), secret.trim().as_bytes().to_vec())
                }
                _ => (derived_key_id(entry.as_bytes()), entry.as_bytes().to_vec()),
            };
            let n = n + 1;
            if secret.len() < MIN_SECRET_LEN {
                return Err(format!("entry {n}: the secret is shorter than {MIN_SECRET_LEN} bytes"));
            }
            let distinct = secret.iter().collect::<std::collections::BTreeSet<_>>().len();
            if distinct < MIN_DISTINCT_SECRET_BYTES {
                return Err(format!(
                    "entry {n}: the secret is not random (fewer than {MIN_DISTINCT_SECRET_BYTES} different characters); generate one with `openssl rand -hex 32`"
                ));
            }
            if let Some(first) = keys.iter().position(|(other, _)| *other == id) {
                return Err(format!("entries {} and {n} have the same key id", first + 1));
            }
            keys.push((id, secret));
        }
        Self::new(keys, clock)
    }

    /// Seals in `format` from now on (`MCP_SEAL_FORMAT`); opening is unchanged.
    pub fn sealing(mut self, format: SealFormat) -> Self {
        self.format = format;
        self
    }

    /// The id of the key that seals.
    pub fn current_key_id(&self) -> &str {
        &self.keys[0].id
    }

    /// The clock envelopes are judged by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Seals `data`, bound to `binding`, valid for `ttl_ms` from now.
    pub fn seal(&self, purpose: Purpose, binding: &[u8], ttl_ms: u64, data: Value) -> String {
        let key = &self.keys[0];
        let exp = self.clock.now_ms().saturating_add(ttl_ms);
        let (version, payload) = match self.format {
            SealFormat::V2 => ("v2.", serde_json::to_vec(&Payload { exp, data })),
            SealFormat::V1 => {
                let bind = hex(digest::digest(&digest::SHA256, binding).as_ref());
                ("v1.", serde_json::to_vec(&PayloadV1 { exp, bind: &bind, data }))
            }
        };
        let payload = payload.expect("payload serialises");
        let mut out = String::with_capacity(8 + key.id.len() + payload.len() * 4 / 3 + 48);
        out.push_str(version);
        out.push_str(&key.id);
        out.push('.');
        URL_SAFE_NO_PAD.encode_string(&payload, &mut out);
        let mac_binding = self.format.binding_under_mac(binding);
        let tag = hmac::sign(&key.key, &mac_input(purpose, mac_binding, out.as_bytes()));
        out.push('.');
        URL_SAFE_NO_PAD.encode_string(tag.as_ref(), &mut out);
        out
    }

    /// A key derived from the current sealing key for another purpose (`label`), so the sealing
    /// key itself is used only for sealing.
    pub fn derive_key(&self, label: &str) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.keys[0].key);
        ctx.update(b"mcp.derived-key\n");
        ctx.update(label.as_bytes());
        ctx.sign().as_ref().try_into().expect("HMAC-SHA256 is 32 bytes")
    }

    /// Opens an envelope: checks shape, key, MAC (constant time; it covers the binding), and
    /// expiry, in that order, and returns the sealed data.
    pub fn open(&self, purpose: Purpose, binding: &[u8], sealed: &str) -> Result<Value, SealError> {
        if sealed.len() > MAX_SEALED_LEN {
            return Err(SealError::Malformed);
        }
        let (signed, tag) = sealed.rsplit_once('.').ok_or(SealError::Malformed)?;
        let mut parts = signed.splitn(3, '.');
        let (Some(version), Some(kid), Some(payload)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(SealError::Malformed);
        };
        let format = match version {
            "v2" => SealFormat::V2,
            "v1" => SealFormat::V1,
            _ => return Err(SealError::Malformed),
        };
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| SealError::Malformed)?;
        let key = self.keys.iter().find(|k| k.id == kid).ok_or(SealError::UnknownKey)?;
        let message = mac_input(purpose, format.binding_under_mac(binding), signed.as_bytes());
        hmac::verify(&key.key, &message, &tag).map_err(|_| SealError::BadSignature)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| SealError::Malformed)?;
        if format == SealFormat::V1 {
            return self.open_v1_payload(binding, &payload);
        }
        let payload: Payload = serde_json::from_slice(&payload).map_err(|_| SealError::Malformed)?;
        if self.clock.now_ms() >= payload.exp {
            return Err(SealError::Expired);
        }
        Ok(payload.data)
    }

    /// The rest of opening a `v1` envelope whose MAC verified: expiry, then the binding its
    /// payload names.
    fn open_v1_payload(&self, binding: &[u8], payload: &[u8]) -> Result<Value, SealError> {
        let payload: PayloadV1 = serde_json::from_slice(payload).map_err(|_| SealError::Malformed)?;
        if self.clock.now_ms() >= payload.exp {
            return Err(SealError::Expired);
        }
        let expected = hex(digest::digest(&digest::SHA256, binding).as_ref());
        if payload.bind != expected {
            return Err(SealError::WrongBinding);
        }
        Ok(payload.data)
    }
}

/// What an envelope's MAC covers: the purpose, then (from `v2` on) the binding with its length,
/// then the signed text. The purpose labels hold no newline, and the length fixes where the
/// binding ends, so no two inputs run together; after the newline a `v1` input has `v`, a later
/// one the zero high byte of the length, so the formats never share an input either.
fn mac_input(purpose: Purpose, binding: Option<&[u8]>, signed: &[u8]) -> Vec<u8> {
    let label = purpose.label();
    let binding_len = binding.map_or(0, |b| 8 + b.len());
    let mut message = Vec::with_capacity(label.len() + 1 + binding_len + signed.len());
    message.extend_from_slice(label);
    message.push(b'\n');
    if let Some(binding) = binding {
        message.extend_from_slice(&(binding.len() as u64).to_be_bytes());
        message.extend_from_slice(binding);
    }
    message.extend_from_slice(signed);
    message
}

/// A key id derived from a secret: the first 8 hex digits of its SHA-256. Reveals nothing
/// usable about a 32-byte secret, and lets operators rotate without naming keys.
pub fn derived_key_id(secret: &[u8]) -> String {
    hex(&digest::digest(&digest::SHA256, secret).as_ref()[..4])
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    write_hex(&mut out, bytes);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// Writes `bytes` as lower-case hex into `out`, which holds exactly two digits per byte.
pub fn write_hex(out: &mut [u8], bytes: &[u8]) {
    debug_assert_eq!(out.len(), 2 * bytes.len());
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX_DIGITS[(b >> 4) as usize];
        pair[1] = HEX_DIGITS[(b & 15) as usize];
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ManualClock;
    use serde_json::json;

    const A: &[u8] = b"0123456789abcdef0123456789abcdef";
    const B: &[u8] = b"fedcba9876543210fedcba9876543210";

    fn sealer(keys: &[(&str, &[u8])], clock: &Arc<ManualClock>) -> Sealer {
        let keys = keys.iter().map(|(id, s)| (id.to_string(), s.to_vec())).collect();
        Sealer::new(keys, clock.clone()).unwrap()
    }

    #[test]
    fn round_trips_and_binds() {
        let clock = Arc::new(ManualClock::new(1_000));
        let s = sealer(&[("k1", A)], &clock);
        let env = s.seal(Purpose::RequestState, b"alice|tools/call|x", 60_000, json!({"round": 2}));
        assert_eq!(s.open(Purpose::RequestState, b"alice|tools/call|x", &env), Ok(json!({"round": 2})));
        // Another binding fails as a forgery does: the MAC covers it.
        assert_eq!(s.open(Purpose::RequestState, b"bob|tools/call|x", &env), Err(SealError::BadSignature));
        assert_eq!(s.open(Purpose::RequestState, b"alice|tools/call|", &env), Err(SealError::BadSignature));
        assert_eq!(s.open(Purpose::JobHandle, b"alice|tools/call|x", &env), Err(SealError::BadSignature));
    }

    #[test]
    fn every_altered_byte_is_refused() {
        let clock = Arc::new(ManualClock::new(1_000));
        let s = sealer(&[("k1", A)], &clock);
        let env = s.seal(Purpose::RequestState, b"b", 60_000, json!("x"));
        let bytes = env.as_bytes();
        for i in 0..bytes.len() {
            for replacement in [b'A', b'.', b'_', b'0'] {
                if bytes[i] == replacement {
                    continue;
                }
                let mut altered = bytes.to_vec();
                altered[i] = replacement;
                let altered = String::from_utf8(altered).unwrap();
                assert!(s.open(Purpose::RequestState, b"b", &altered).is_err(), "byte {i} -> {replacement}");
            }
        }
        assert!(s.open(Purpose::RequestState, b"b", &env[..env.len() - 1]).is_err());
        assert!(s.open(Purpose::RequestState, b"b", &format!("{env}A")).is_err());
        assert!(s.open(Purpose::RequestState, b"b", "").is_err());
        assert!(s.open(Purpose::RequestState, b"b", &"a".repeat(MAX_SEALED_LEN + 1)).is_err());
    }

    #[test]
    fn expires_at_its_deadline() {
        let clock = Arc::new(ManualClock::new(1_000));
        let s = sealer(&[("k1", A)], &clock);
        let env = s.seal(Purpose::RequestState, b"b", 500, json!(1));
        clock.advance_ms(499);
        assert!(s.open(Purpose::RequestState, b"b", &env).is_ok());
        clock.advance_ms(1);
        assert_eq!(s.open(Purpose::RequestState, b"b", &env), Err(SealError::Expired));
    }

    #[test]
    fn rotation_keeps_old_envelopes_valid_and_unknown_keys_fail() {
        let clock = Arc::new(ManualClock::new(1_000));
        let old = sealer(&[("k1", A)], &clock);
        let env = old.seal(Purpose::RequestState, b"b", 60_000, json!(1));
        let rotated = sealer(&[("k2", B), ("k1", A)], &clock);
        assert_eq!(rotated.current_key_id(), "k2");
        assert_eq!(rotated.open(Purpose::RequestState, b"b", &env), Ok(json!(1)));
        let fresh = rotated.seal(Purpose::RequestState, b"b", 60_000, json!(2));
        assert!(fresh.starts_with("v2.k2."));
        assert_eq!(old.open(Purpose::RequestState, b"b", &fresh), Err(SealError::UnknownKey));
        let retired = sealer(&[("k2", B)], &clock);
        assert_eq!(retired.open(Purpose::RequestState, b"b", &env), Err(SealError::UnknownKey));
        // Same key id, different secret: the MAC fails.
        let impostor = sealer(&[("k1", B)], &clock);
        assert_eq!(impostor.open(Purpose::RequestState, b"b", &env), Err(SealError::BadSignature));
    }

    #[test]
    fn env_value_parsing() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let (hex, other) = ("0123456789abcdef".repeat(2), "fedcba9876543210".repeat(3));
        let s = Sealer::from_env_value(&format!(" new={hex} , {other} "), clock.clone()).unwrap();
        assert_eq!(s.current_key_id(), "new");
        assert!(Sealer::from_env_value("short", clock.clone()).is_err());
        assert!(Sealer::from_env_value("", clock.clone()).is_err());
        assert!(Sealer::from_env_value(&format!("a={hex},a={hex}"), clock.clone()).is_err());
        // Long enough, but a character or a word repeated: refused, without quoting it.
        for guessable in ["x".repeat(32), "password".repeat(4), format!("k1={}", "ab".repeat(20))] {
            let problem = Sealer::from_env_value(&guessable, clock.clone()).unwrap_err();
            assert!(problem.starts_with("entry 1: the secret is not random"), "{problem}");
            assert!(!problem.contains("xxxx") && !problem.contains("password") && !problem.contains("abab"));
        }
        assert!(Sealer::from_env_value("abcdefgh".repeat(4).as_str(), clock.clone()).is_ok(), "eight different bytes");
    }

    #[test]
    fn a_bare_base64_secret_is_never_split_into_a_key_id() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        // 16 random bytes in padded base64: 22 characters that look like a key id, then "==".
        for bare in [
            "QkFTRTY0c2VjcmV0cGFydDEyMzQ1Njc4OTBhYmNkZWZnaA==",
            "c2VjcmV0LXdpdGgtcGFkZGluZy0xMjM0NTY3ODkwMTI=",
            "AAAAAAAAAAAAAAAAAAAAAA==",
        ] {
            let (id, _) = bare.split_once('=').unwrap();
            match Sealer::from_env_value(bare, clock.clone()) {
                Ok(sealer) => {
                    assert_eq!(sealer.current_key_id(), derived_key_id(bare.as_bytes()), "{bare}");
                    assert!(!format!("{sealer:?}").contains(id), "no part of the secret is a key id");
                }
                Err(problem) => assert!(!problem.contains(id), "no part of the secret in {problem}"),
            }
        }
        let short = Sealer::from_env_value("AAAAAAAAAAAAAAAAAAAAAA==", clock.clone()).unwrap_err();
        assert_eq!(short, "entry 1: the secret is shorter than 32 bytes");
        let named = Sealer::from_env_value(&format!("k2={}", "0123456789abcdef".repeat(2)), clock.clone()).unwrap();
        assert_eq!(named.current_key_id(), "k2", "kid=secret still names its key");
        let short_named = Sealer::from_env_value("mykid=tooshort", clock).unwrap_err();
        assert!(!short_named.contains("mykid") && !short_named.contains("tooshort"), "{short_named}");
    }

    #[test]
    fn payload_does_not_reveal_the_binding() {
        let clock = Arc::new(ManualClock::new(0));
        let s = sealer(&[("k1", A)], &clock);
        let env = s.seal(Purpose::RequestState, b"user:alice@example.com", 1_000, json!(null));
        let payload = env.split('.').nth(2).unwrap();
        let decoded: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        assert_eq!(decoded, json!({"exp": 1_000, "data": null}), "nothing but the expiry and the data");
    }

    /// Envelopes of the first format, as the release before this one sealed them (key `A` as
    /// `k1`, expiring at 61 000 ms), generated from the documented format by an independent
    /// implementation.
    const V1_REQUEST_STATE: &str = "v1.k1.eyJleHAiOjYxMDAwLCJiaW5kIjoiM2UyM2U4MTYwMDM5NTk0YTMzODk0ZjY1NjRlMWIxMzQ4YmJkN2EwMDg4ZDQyYzRhY2I3M2VlYWVkNTljMDA5ZCIsImRhdGEiOnsicm91bmQiOjJ9fQ.uEdbqWv8D3h9hDB0L-OFGcF3GA4ouwlAdJCrUvum5NE";
    const V1_JOB_HANDLE: &str = "v1.k1.eyJleHAiOjYxMDAwLCJiaW5kIjoiZDAzYmIyZDlmOWVmYzBjOGNlZTlhZWFmY2EzMmYxMmNmMTNmYTY1NzM3MzNiZDQ2OWMxMWIyN2FmMjAxNmI2ZCIsImRhdGEiOiJBQUFBQUFBQUFBQUFBQUFBQUFBQUFBIn0.YBvb4WkY8pVfDbdwTNYHbaOn9dc94wyCXWHaoFF449M";

    #[test]
    fn first_format_envelopes_open_until_they_expire() {
        let clock = Arc::new(ManualClock::new(1_000));
        let s = sealer(&[("k1", A)], &clock);
        assert_eq!(s.open(Purpose::RequestState, b"b", V1_REQUEST_STATE), Ok(json!({"round": 2})));
        assert_eq!(s.open(Purpose::JobHandle, b"sub:alice", V1_JOB_HANDLE), Ok(json!("AAAAAAAAAAAAAAAAAAAAAA")));
        assert_eq!(s.open(Purpose::RequestState, b"c", V1_REQUEST_STATE), Err(SealError::WrongBinding));
        assert_eq!(s.open(Purpose::JobHandle, b"b", V1_REQUEST_STATE), Err(SealError::BadSignature));
        // Relabelled as the current format, it is judged by the current MAC and fails.
        let relabelled = V1_REQUEST_STATE.replacen("v1.", "v2.", 1);
        assert_eq!(s.open(Purpose::RequestState, b"b", &relabelled), Err(SealError::BadSignature));
        for i in 0..V1_JOB_HANDLE.len() {
            let mut altered = V1_JOB_HANDLE.as_bytes().to_vec();
            altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(altered).unwrap();
            assert!(s.open(Purpose::JobHandle, b"sub:alice", &altered).is_err(), "byte {i}");
        }
        clock.advance_ms(60_000);
        assert_eq!(s.open(Purpose::RequestState, b"b", V1_REQUEST_STATE), Err(SealError::Expired));
    }

    #[test]
    fn the_binding_cannot_lend_its_end_to_the_signed_text() {
        // Without the binding's length under the MAC, binding "zv2.k1." + text "v2.k1.<p>" and
        // binding "z" + text "v2.k1.v2.k1.<p>" would be the same MAC input.
        let clock = Arc::new(ManualClock::new(1_000));
        let s = sealer(&[("k1", A)], &clock);
        let env = s.seal(Purpose::JobHandle, b"zv2.k1.", 60_000, json!("x"));
        let (signed, tag) = env.rsplit_once('.').unwrap();
        let shifted = format!("v2.k1.{signed}.{tag}");
        assert_eq!(s.open(Purpose::JobHandle, b"z", &shifted), Err(SealError::BadSignature));
    }

    #[test]
    fn a_sealer_told_to_seal_the_first_format_does_so_and_everyone_opens_it() {
        let clock = Arc::new(ManualClock::new(1_000));
        let old = sealer(&[("k1", A)], &clock).sealing(SealFormat::V1);
        let env = old.seal(Purpose::RequestState, b"b", 60_000, json!({"round": 2}));
        assert!(env.starts_with("v1.k1."), "{env}");
        for reader in [&old, &sealer(&[("k1", A)], &clock)] {
            assert_eq!(reader.open(Purpose::RequestState, b"b", &env), Ok(json!({"round": 2})));
            assert_eq!(reader.open(Purpose::RequestState, b"c", &env), Err(SealError::WrongBinding));
            assert_eq!(reader.open(Purpose::JobHandle, b"b", &env), Err(SealError::BadSignature));
        }
        // Byte for byte what the release before sealed.
        let fixture = sealer(&[("k1", A)], &Arc::new(ManualClock::new(1_000))).sealing(SealFormat::V1);
        assert_eq!(fixture.seal(Purpose::RequestState, b"b", 60_000, json!({"round": 2})), V1_REQUEST_STATE);
        assert_eq!(old.sealing(SealFormat::V2).seal(Purpose::RequestState, b"b", 1, json!(1))[..3], *"v2.");
    }

    #[test]
    fn a_current_envelope_relabelled_as_the_first_format_fails() {
        let clock = Arc::new(ManualClock::new(1_000));
        let s = sealer(&[("k1", A)], &clock);
        let env = s.seal(Purpose::JobHandle, b"sub:alice", 60_000, json!("AAAAAAAAAAAAAAAAAAAAAA"));
        assert!(env.starts_with("v2.k1."));
        let relabelled = env.replacen("v2.", "v1.", 1);
        assert_eq!(s.open(Purpose::JobHandle, b"sub:alice", &relabelled), Err(SealError::BadSignature));
        assert_eq!(s.open(Purpose::JobHandle, b"sub:alice", &env.replacen("v2.", "v3.", 1)), Err(SealError::Malformed));
    }
}
