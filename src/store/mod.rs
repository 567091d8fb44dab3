//! The storage layer: what every store in the crate shares, whoever owns the records.
//!
//! [`StoreError`] and [`StoreFuture`] are the vocabulary of every store trait (jobs, tasks, the
//! examples' items and names); [`Redis`] is the one shared connection to the deployment's Redis,
//! which every Redis-backed store, the change bus and the nonce store take; [`Shared`] says
//! where records shared between instances live, chosen once from the settings and handed to
//! each owner so it builds its own store.

mod redis;

pub use self::redis::{Redis, capped_fault_from, fault_from};

use std::future::Future;
use std::pin::Pin;

/// Where the records that must outlive one instance live.
#[derive(Clone, Debug)]
pub enum Shared {
    /// In this process's memory: the local run and tests only.
    Memory,
    /// The deployment's Redis.
    Redis(Redis),
    /// Deployed without `REDIS_URL`: every operation fails naming the variable, so nothing ever
    /// falls back to one instance's memory.
    Unconfigured,
}

/// The error code the capped stores' Lua scripts raise when their cap is reached
/// (`redis.error_reply('STORE_FULL …')`).
pub const STORE_FULL_CODE: &str = "STORE_FULL";

/// The store error of a store deployed without `REDIS_URL`; `what` names the records.
pub fn redis_url_unset(what: &str) -> StoreError {
    StoreError::fault(format!("REDIS_URL is not set: {what} need a shared store (Redis) when deployed"))
}

/// A boxed store future.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A store call that did not do what was asked. The message is for the caller and the log, so it
/// never carries secrets, key names or a server's own error text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
}

/// What a [`StoreError`] means for the caller: a fault is an operator's problem (logged with a
/// correlation id); the others are answers the caller can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// Unreachable, not configured, or an unreadable answer.
    Fault,
    /// A capacity limit was reached.
    Full,
    /// Other writers kept winning a compare-and-set: retryable.
    Contention,
}

impl StoreError {
    /// The store is unreachable, not configured, or answered nonsense.
    pub fn fault(message: impl Into<String>) -> Self {
        Self { kind: StoreErrorKind::Fault, message: message.into() }
    }

    /// A capacity limit was reached.
    pub fn full(message: impl Into<String>) -> Self {
        Self { kind: StoreErrorKind::Full, message: message.into() }
    }

    /// A compare-and-set kept losing to other writers.
    pub fn contention(message: impl Into<String>) -> Self {
        Self { kind: StoreErrorKind::Contention, message: message.into() }
    }

    /// What the failure means for the caller.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The text for the caller and the log.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {}
