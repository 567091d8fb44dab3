//! Single-use `requestState`: each sealed state carries a random nonce, and a retry is served
//! only if its nonce has not been used before. The store remembers a used nonce for as long as
//! any state carrying it could still open (the state's lifetime, and a minute more for clocks
//! that differ between instances), then forgets it.
//!
//! Deployed, the store is Redis (`SET NX PX`: atomic, shared by every instance); the local run
//! keeps used nonces in memory, since only one process serves it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// A consume result, or why the store could not say (a message naming no secret).
pub type NonceFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;

/// Remembers used nonces.
pub trait NonceStore: Send + Sync + 'static {
    /// Marks `nonce` used for `ttl_ms` from `now_ms`; `true` on its first use only.
    fn consume<'a>(&'a self, nonce: &'a str, now_ms: u64, ttl_ms: u64) -> NonceFuture<'a>;
}

/// Used nonces in this process's memory (the local run), bounded: past the bound, expired ones
/// are dropped, and if none has expired the state is refused rather than remembered loosely.
#[derive(Debug, Default)]
pub struct MemoryNonces {
    used: Mutex<HashMap<String, u64>>,
}

/// How many live nonces the memory store keeps.
const MAX_MEMORY_NONCES: usize = 100_000;

impl NonceStore for MemoryNonces {
    fn consume<'a>(&'a self, nonce: &'a str, now_ms: u64, ttl_ms: u64) -> NonceFuture<'a> {
        let mut used = self.used.lock().expect("nonce lock");
        let fresh = if used.get(nonce).is_some_and(|&until| now_ms < until) {
            Ok(false)
        } else {
            if used.len() >= MAX_MEMORY_NONCES {
                used.retain(|_, until| now_ms < *until);
            }
            if used.len() >= MAX_MEMORY_NONCES {
                Err("too many request states in use; try again later".to_owned())
            } else {
                used.insert(nonce.to_owned(), now_ms + ttl_ms);
                Ok(true)
            }
        };
        Box::pin(std::future::ready(fresh))
    }
}

/// Used nonces in Redis under `{prefix}:nonce:{nonce}`, each expiring a minute after its state.
#[derive(Clone)]
pub struct RedisNonces {
    connection: redis::aio::ConnectionManager,
    prefix: String,
}

impl RedisNonces {
    /// On the shared connection, under its prefix.
    pub fn new(redis: &crate::store::Redis) -> Self {
        Self { connection: redis.connection(), prefix: redis.prefix().to_owned() }
    }
}

impl NonceStore for RedisNonces {
    fn consume<'a>(&'a self, nonce: &'a str, _now_ms: u64, ttl_ms: u64) -> NonceFuture<'a> {
        Box::pin(crate::telemetry::redis_span("nonce.consume", async move {
            let set: Option<String> = redis::cmd("SET")
                .arg(format!("{}:nonce:{nonce}", self.prefix))
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms.max(1))
                .query_async(&mut self.connection.clone())
                .await
                .map_err(|e| format!("request state store unavailable: {:?}", e.kind()))?;
            Ok(set.is_some())
        }))
    }
}

/// Deployed without `REDIS_URL`: single use cannot be guaranteed across instances, so every
/// retry fails naming the variable (or set `MCP_REQUEST_STATE_SINGLE_USE=off`).
#[derive(Debug, Default)]
pub struct UnconfiguredNonces;

impl NonceStore for UnconfiguredNonces {
    fn consume<'a>(&'a self, _: &'a str, _: u64, _: u64) -> NonceFuture<'a> {
        Box::pin(std::future::ready(Err(
            "REDIS_URL is not set: single-use requestState needs a shared store when deployed \
             (or MCP_REQUEST_STATE_SINGLE_USE=off)"
                .to_owned(),
        )))
    }
}

/// The nonce store for where shared records live.
pub fn nonce_store(shared: &crate::store::Shared) -> std::sync::Arc<dyn NonceStore> {
    use crate::store::Shared;
    match shared {
        Shared::Memory => std::sync::Arc::new(MemoryNonces::default()),
        Shared::Redis(redis) => std::sync::Arc::new(RedisNonces::new(redis)),
        Shared::Unconfigured => std::sync::Arc::new(UnconfiguredNonces),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_nonce_is_used_once_until_it_expires() {
        let store = MemoryNonces::default();
        assert_eq!(store.consume("n1", 0, 100).await, Ok(true));
        assert_eq!(store.consume("n1", 50, 100).await, Ok(false), "a replay");
        assert_eq!(store.consume("n2", 50, 100).await, Ok(true));
        assert_eq!(store.consume("n1", 100, 100).await, Ok(true), "forgotten once no state could carry it");
    }
}
