//! Job handles: what clients hold instead of a job id.
//!
//! A handle is a sealed envelope (`state::seal`, purpose "job handle") around a 128-bit random
//! job id, bound to the owning principal and expiring after [`HANDLE_TTL_MS`]. Altered, expired
//! and foreign handles are refused before any store read, and all of them produce the same
//! error as a handle that never existed, so a handle reveals nothing about other principals.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::state::{Purpose, Random, Sealer};

/// How long a handle can be redeemed: an active job's deadline plus its retention.
pub const HANDLE_TTL_MS: u64 = super::model::JOB_DEADLINE_MS + super::model::JOB_RETENTION_MS;
/// The one message for every handle that does not resolve to a job of the caller.
pub const UNKNOWN_JOB_HANDLE: &str = "unknown job handle";

/// A fresh job id: 16 random bytes, base64url without padding (22 characters).
pub fn new_job_id(random: &dyn Random) -> String {
    let mut bytes = [0u8; 16];
    random.fill(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `id` has the shape of a job id.
pub fn is_job_id(id: &str) -> bool {
    id.len() == 22 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What a handle is bound to: its owner's principal id, and for an endpoint other than
/// `/api/mcp` a newline and that endpoint's path (a principal id holds no control character, so
/// the two cannot run together). `/api/mcp`'s handles are bound to the owner alone, as every
/// handle was before endpoints were told apart.
pub fn holder<'a>(owner: &'a str, endpoint: Option<&str>) -> std::borrow::Cow<'a, str> {
    match endpoint {
        None => std::borrow::Cow::Borrowed(owner),
        Some(path) => std::borrow::Cow::Owned(format!("{owner}\n{path}")),
    }
}

/// Seals `job_id` into a handle for `owner` (a [`holder`]).
pub fn mint(sealer: &Sealer, owner: &str, job_id: &str) -> String {
    sealer.seal(Purpose::JobHandle, owner.as_bytes(), HANDLE_TTL_MS, Value::String(job_id.to_owned()))
}

/// Opens a handle presented by `owner` (a [`holder`]); `None` for anything that is not a live
/// handle of theirs.
pub fn open(sealer: &Sealer, owner: &str, handle: &str) -> Option<String> {
    match sealer.open(Purpose::JobHandle, owner.as_bytes(), handle).ok()? {
        Value::String(id) if is_job_id(&id) => Some(id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ManualClock, SeededRandom};
    use std::sync::Arc;

    #[test]
    fn handles_bind_owner_and_expire() {
        let clock = Arc::new(ManualClock::new(0));
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock.clone()).unwrap();
        let id = new_job_id(&SeededRandom::new(1));
        assert!(is_job_id(&id));
        let handle = mint(&sealer, "sub:alice", &id);
        assert!(!handle.contains("alice"));
        assert_eq!(open(&sealer, "sub:alice", &handle), Some(id.clone()));
        assert_eq!(open(&sealer, "sub:bob", &handle), None);
        assert_eq!(open(&sealer, "sub:alice", &format!("{handle}x")), None);
        assert_eq!(open(&sealer, "sub:alice", &id), None, "a raw id is not a handle");
        let request_state = sealer.seal(Purpose::RequestState, b"sub:alice", 1000, Value::String(id));
        assert_eq!(open(&sealer, "sub:alice", &request_state), None, "another purpose's envelope is refused");
        clock.advance_ms(HANDLE_TTL_MS);
        assert_eq!(open(&sealer, "sub:alice", &handle), None);
    }

    #[test]
    fn ids_are_unique_and_seeded_ids_reproducible() {
        let a: Vec<String> = (0..100).map(|_| new_job_id(&crate::state::SystemRandom::default())).collect();
        let mut unique = a.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 100);
        assert_eq!(new_job_id(&SeededRandom::new(5)), new_job_id(&SeededRandom::new(5)));
    }
}
