//! JSON Web Key Sets: parsing a document into verification keys, and [`JwksCache`], which
//! fetches a JWKS URL, keeps it for a while and refetches (rate-limited) for an unknown `kid`.

use bytes::Bytes;
use jsonwebtoken::jwk::KeyAlgorithm;
use jsonwebtoken::{Algorithm, DecodingKey};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::state::Clock;

/// Parses a JWKS document into keys by `kid`. Keys without a `kid`, of a kind the verifier
/// does not support, or published for something other than verifying signatures (`use` other
/// than `sig`, `key_ops` without `verify`: RFC 7517 §4.2, §4.3), are skipped; so is an entry the
/// key library cannot read at all (an encryption key of a curve it does not know, an algorithm
/// it has no name for): RFC 7517 §5 asks that such keys be ignored, not the set refused, which
/// would keep a key the issuer dropped trusted for as long as its sets carried such an entry.
///
/// A set with no usable key is refused: configured (`MCP_JWKS`), it could verify nothing.
pub fn parse_jwks(document: &[u8]) -> Result<HashMap<String, (DecodingKey, Algorithm)>, String> {
    let keys = read_key_set(document)?;
    if keys.is_empty() {
        return Err("the JWKS holds no usable key with a kid".into());
    }
    Ok(keys)
}

/// [`parse_jwks`] without the refusal of a set with no usable key: fetched, such a set is the
/// issuer saying that no key it published before is good any more.
fn read_key_set(document: &[u8]) -> Result<HashMap<String, (DecodingKey, Algorithm)>, String> {
    use jsonwebtoken::jwk::{Jwk, KeyOperations, PublicKeyUse};
    #[derive(serde::Deserialize)]
    struct Entries {
        keys: Vec<serde_json::Value>,
    }
    let entries: Entries = serde_json::from_slice(document).map_err(|_| "not a JWKS document".to_owned())?;
    let set: Vec<Jwk> = entries.keys.into_iter().filter_map(|entry| serde_json::from_value(entry).ok()).collect();
    let mut keys = HashMap::new();
    for jwk in &set {
        let Some(kid) = jwk.common.key_id.clone() else { continue };
        let for_signatures = !matches!(&jwk.common.public_key_use, Some(usage) if *usage != PublicKeyUse::Signature)
            && jwk.common.key_operations.as_ref().is_none_or(|ops| ops.contains(&KeyOperations::Verify));
        if !for_signatures {
            continue;
        }
        let algorithm = match (&jwk.algorithm, jwk.common.key_algorithm) {
            (_, Some(alg)) => match signing_algorithm(alg) {
                Some(alg) => alg,
                None => continue,
            },
            (jsonwebtoken::jwk::AlgorithmParameters::RSA(_), None) => Algorithm::RS256,
            // Without `alg` (RFC 7517 makes it optional) an EC key's curve says which it signs.
            (jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(ec), None) => match ec.curve {
                jsonwebtoken::jwk::EllipticCurve::P256 => Algorithm::ES256,
                jsonwebtoken::jwk::EllipticCurve::P384 => Algorithm::ES384,
                _ => continue,
            },
            (jsonwebtoken::jwk::AlgorithmParameters::OctetKeyPair(_), None) => Algorithm::EdDSA,
            _ => continue,
        };
        if let Ok(key) = DecodingKey::from_jwk(jwk) {
            keys.insert(kid, (key, algorithm));
        }
    }
    Ok(keys)
}

/// The signature algorithm a JWK's `alg` names; `None` for key-encryption algorithms, which
/// never verify a token.
fn signing_algorithm(alg: KeyAlgorithm) -> Option<Algorithm> {
    Some(match alg {
        KeyAlgorithm::HS256 => Algorithm::HS256,
        KeyAlgorithm::HS384 => Algorithm::HS384,
        KeyAlgorithm::HS512 => Algorithm::HS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        KeyAlgorithm::RSA1_5 | KeyAlgorithm::RSA_OAEP | KeyAlgorithm::RSA_OAEP_256 => return None,
    })
}

/// A JWKS fetched from a URL, cached for `ttl`, refetched early (at most every `min_refetch`)
/// when a token names a `kid` it does not hold. Instance memory here is only a cache.
pub struct JwksCache {
    url: String,
    ttl: Duration,
    min_refetch: Duration,
    clock: Arc<dyn Clock>,
    state: Mutex<CacheState>,
    /// Serialises fetches so a burst of unknown `kid`s causes one request; held by the fetch
    /// itself, which runs detached from the caller that began it.
    fetching: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct CacheState {
    keys: Arc<HashMap<String, (DecodingKey, Algorithm)>>,
    /// When a key set last arrived: the keys are fresh for `ttl` after it.
    fetched_at: Option<u64>,
    /// When the last fetch began, answered or not: the next waits `min_refetch` after it.
    attempted_at: Option<u64>,
    /// Fetches begun so far: a request that waited for another's fetch sees this change.
    fetches: u64,
    /// The last fetch brought no key set (the issuer could not be reached, or answered with
    /// something else): a `kid` not held may be one the issuer publishes.
    unreachable: bool,
}

/// The issuer's keys could not be fetched, so a token naming a key not held can be neither
/// accepted nor refused: its caller is asked to come back (503) rather than told its token is
/// invalid, which would have it throw away a good token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeysUnavailable {
    /// Seconds until the next fetch may begin (at least 1).
    pub retry_after_secs: u64,
}

impl JwksCache {
    /// A cache of `url`.
    pub fn new(url: String, ttl: Duration, min_refetch: Duration, clock: Arc<dyn Clock>) -> Self {
        Self { url, ttl, min_refetch, clock, state: Mutex::default(), fetching: Arc::default() }
    }

    /// The key named `kid`: `None` when the issuer's latest key set does not publish it, and
    /// [`KeysUnavailable`] when it is not held and the latest fetch brought no key set.
    pub(crate) async fn key(self: &Arc<Self>, kid: &str) -> Result<Option<(DecodingKey, Algorithm)>, KeysUnavailable> {
        let now = self.clock.now_ms();
        let (cached, fresh, may_fetch, seen) = {
            let state = self.state.lock().expect("jwks lock");
            let age = |at: Option<u64>| at.map(|at| now.saturating_sub(at));
            (
                state.keys.get(kid).cloned(),
                age(state.fetched_at).is_some_and(|a| a < self.ttl.as_millis() as u64),
                age(state.attempted_at).is_none_or(|a| a >= self.min_refetch.as_millis() as u64),
                state.fetches,
            )
        };
        if let (Some(key), true) = (&cached, fresh) {
            return Ok(Some(key.clone()));
        }
        // Stale keys, or an unknown `kid`: fetched at most once every `min_refetch`, counted from
        // when each fetch begins. The fetch runs detached from this caller: one that leaves
        // midway (its request dropped) neither repeats it nor cuts it short, so callers that
        // leave at once can neither fetch without limit nor keep the keys from being refreshed.
        if may_fetch {
            let guard = Arc::clone(&self.fetching).lock_owned().await;
            // A fetch made while this request waited is as recent as its own would be. (Comparing
            // times would not do: a fetch is stamped when it starts, so every request that arrived
            // during a slow fetch would fetch again, one after another.)
            let refreshed = self.state.lock().expect("jwks lock").fetches != seen;
            if !refreshed {
                let cache = Arc::clone(self);
                // Under the caller's span still: the fetch is a CLIENT span in its trace.
                let _ = tokio::spawn(crate::telemetry::carry_current(async move {
                    let _guard = guard;
                    cache.fetch().await;
                }))
                .await;
            }
        } else if cached.is_none() {
            // An unknown `kid` within the floor: a fetch under way (the first, say, while others
            // arrive) may bring it, so it is waited for.
            drop(self.fetching.lock().await);
        }
        // A stale key is used while a fetch is under way or cannot begin yet, as while the issuer
        // cannot be reached: only the caller that began the fetch waits for it.
        let state = self.state.lock().expect("jwks lock");
        match state.keys.get(kid) {
            Some(key) => Ok(Some(key.clone())),
            None if state.unreachable => {
                let next_fetch = state.attempted_at.unwrap_or(0).saturating_add(self.min_refetch.as_millis() as u64);
                let wait_ms = next_fetch.saturating_sub(self.clock.now_ms());
                Err(KeysUnavailable { retry_after_secs: wait_ms.div_ceil(1000).max(1) })
            }
            None => Ok(None),
        }
    }

    async fn fetch(&self) {
        let Ok(request) = http::Request::get(&self.url).body(http_body_util::Full::new(Bytes::new())) else { return };
        {
            let mut state = self.state.lock().expect("jwks lock");
            state.attempted_at = Some(self.clock.now_ms());
            state.fetches += 1;
        }
        let fetched = crate::outbound::send(request, Duration::from_secs(5)).await;
        // Keys already held stay usable while the issuer cannot be reached or answers with
        // something that is not a key set. A key set replaces them, even one with no usable key:
        // keeping a key the issuer dropped because nothing replaced it would trust it for as long
        // as the issuer publishes none.
        let keys =
            fetched.ok().filter(|response| response.status.is_success()).map(|response| read_key_set(&response.body));
        let mut state = self.state.lock().expect("jwks lock");
        match keys {
            Some(Ok(keys)) => {
                state.keys = Arc::new(keys);
                state.fetched_at = Some(self.clock.now_ms());
                state.unreachable = false;
            }
            _ => state.unreachable = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_published_for_signatures_are_kept() {
        let jwks = include_str!("../../tests/fixtures/jwks.json");
        let mut document: serde_json::Value = serde_json::from_str(jwks).unwrap();
        let key = document["keys"][0].clone();
        let with = |extra: serde_json::Value| {
            let mut key = key.clone();
            for published in ["alg", "use", "key_ops"] {
                key.as_object_mut().unwrap().remove(published);
            }
            key.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            key
        };
        document["keys"] = serde_json::json!([
            with(serde_json::json!({"kid": "plain"})),
            with(serde_json::json!({"kid": "sig", "use": "sig"})),
            with(serde_json::json!({"kid": "verify", "key_ops": ["verify"]})),
            with(serde_json::json!({"kid": "enc", "use": "enc"})),
            with(serde_json::json!({"kid": "encrypt", "key_ops": ["encrypt"]})),
        ]);
        let keys = parse_jwks(document.to_string().as_bytes()).unwrap();
        let mut kept: Vec<&str> = keys.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["plain", "sig", "verify"], "keys for encryption never verify a token");
    }

    /// An entry the key library cannot read (a curve or an algorithm it has no name for) is
    /// ignored, and the keys beside it are kept (RFC 7517 §5); a document that is not a set of
    /// keys is still refused.
    #[test]
    fn an_entry_that_cannot_be_read_is_ignored_not_the_set() {
        let jwks = include_str!("../../tests/fixtures/jwks.json");
        let mut document: serde_json::Value = serde_json::from_str(jwks).unwrap();
        let unreadable = [
            serde_json::json!({"kty": "OKP", "crv": "X25519", "use": "enc", "kid": "x25519", "x": "AAAA"}),
            serde_json::json!({"kty": "RSA", "alg": "RSA-OAEP-384", "kid": "oaep384", "n": "AQAB", "e": "AQAB"}),
            serde_json::json!({"kty": "AKP", "alg": "ML-DSA-44", "kid": "pq", "pub": "AAAA"}),
            serde_json::json!({"kid": "no-kty"}),
        ];
        document["keys"].as_array_mut().unwrap().extend(unreadable);
        let keys = parse_jwks(document.to_string().as_bytes()).expect("the set is read");
        assert!(keys.contains_key("test-rsa-1"), "the readable key is kept");
        for refused in [&b"[]"[..], b"{\"keys\": {}}", b"not json"] {
            assert!(parse_jwks(refused).is_err(), "{}", String::from_utf8_lossy(refused));
        }
    }

    /// An EC key published without `alg` signs with its curve's algorithm: a P-384 key is not
    /// taken for ES256 (which would refuse every ES384 token it signed), and a curve the key
    /// library cannot verify with is left out.
    #[test]
    fn an_ec_key_without_alg_signs_with_its_curve_s_algorithm() {
        use base64::Engine;
        let coordinate = |bytes: usize| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(vec![7u8; bytes]);
        let key = |kid: &str, crv: &str, bytes: usize| serde_json::json!({"kty": "EC", "kid": kid, "crv": crv, "x": coordinate(bytes), "y": coordinate(bytes)});
        let document =
            serde_json::json!({"keys": [key("p256", "P-256", 32), key("p384", "P-384", 48), key("p521", "P-521", 66)]});
        let keys = parse_jwks(document.to_string().as_bytes()).unwrap();
        let algorithm = |kid: &str| keys.get(kid).map(|(_, alg)| *alg);
        assert_eq!(algorithm("p256"), Some(Algorithm::ES256));
        assert_eq!(algorithm("p384"), Some(Algorithm::ES384));
        assert_eq!(algorithm("p521"), None, "no algorithm here verifies with P-521");
    }

    #[test]
    fn key_encryption_algorithms_never_verify() {
        assert_eq!(signing_algorithm(KeyAlgorithm::RS256), Some(Algorithm::RS256));
        assert_eq!(signing_algorithm(KeyAlgorithm::EdDSA), Some(Algorithm::EdDSA));
        for alg in [KeyAlgorithm::RSA1_5, KeyAlgorithm::RSA_OAEP, KeyAlgorithm::RSA_OAEP_256] {
            assert_eq!(signing_algorithm(alg), None, "{alg:?}");
        }
    }
}
