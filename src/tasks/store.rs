//! Task records and where they live (memory locally, Redis when deployed).
//!
//! Every change is a read-modify-write guarded by the record's `version`: the write succeeds
//! only if nobody changed the record in between, so instances racing on one task (an update on
//! one, a cancel on another, the executor on a third) never lose each other's changes.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use redis::Script;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use crate::store::{Redis, Shared, StoreError, StoreFuture, fault_from, redis_url_unset};

/// Task statuses; the last three are terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for `tasks/update`.
    InputRequired,
    /// Finished with a `CallToolResult` (possibly `isError`).
    Completed,
    /// Finished with a JSON-RPC error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl TaskStatus {
    /// Completed, failed or cancelled: never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// One task as stored. The owner is part of the key and never returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// Optimistic-concurrency counter.
    pub version: u64,
    /// The id clients use.
    pub task_id: String,
    /// Owning principal id.
    pub owner: String,
    /// Whether the owner was a verified principal.
    pub owner_verified: bool,
    /// Scopes the owner held when the task was created.
    pub owner_scopes: Vec<String>,
    /// The tool being run.
    pub tool: String,
    /// Its validated arguments.
    pub arguments: Map<String, Value>,
    /// Current status.
    pub status: TaskStatus,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Creation time (ms).
    pub created_at: u64,
    /// Last change (ms).
    pub updated_at: u64,
    /// Retention from creation (ms).
    pub ttl_ms: u64,
    /// Outstanding input requests (MRTR shape), while `input_required`.
    #[serde(default)]
    pub input_requests: Map<String, Value>,
    /// Answers received so far, under the keys the handler asked with.
    #[serde(default)]
    pub input_responses: Map<String, Value>,
    /// Every key the task has sent a client in `inputRequests`: keys are unique over a task's
    /// lifetime, so a handler asking under a key it used in an earlier round is asked under a
    /// fresh one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked_keys: Vec<String>,
    /// For an outstanding request sent under a fresh key, the key its handler asked with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_aliases: BTreeMap<String, String>,
    /// The handler's own state between rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// The `CallToolResult`, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The JSON-RPC error, once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// Set by `tasks/cancel`.
    #[serde(default)]
    pub cancel_requested: bool,
    /// The longest the round that made the record working may run (ms), by the settings of the
    /// instance that started it: a record still working this long (and a margin) after
    /// `updated_at` was lost. Absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_limit_ms: Option<u64>,
    /// The endpoint whose tool made the task (`/api/examples/<name>`), absent for `/api/mcp`:
    /// each endpoint is its own protected resource, with its own audience and scopes, so a task
    /// is seen and touched only where it was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// What may be stored: per principal, tasks held (in any status, until they expire) and tasks
/// created per minute (a fixed window shared by every instance); and tasks held by every
/// principal together. The share and the rate keep one caller from filling the store that every
/// caller shares; the total bounds what many callers together may put there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskQuota {
    /// Tasks one principal holds.
    pub share: u32,
    /// Tasks one principal creates per minute.
    pub per_minute: u32,
    /// Tasks held by every principal together, across instances.
    pub total: u32,
}

impl Default for TaskQuota {
    fn default() -> Self {
        Self { share: 500, per_minute: 60, total: 10_000 }
    }
}

/// Why a new task was not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskRefused {
    /// The owner holds its share.
    OverShare(u32),
    /// Every owner together holds the total.
    OverTotal(u32),
    /// The owner created its tasks for this minute.
    TooFast(u32),
}

/// The window the per-minute creation rate counts in.
pub const TASK_RATE_WINDOW_MS: u64 = 60_000;

/// Task persistence.
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new record (durably, before its id is handed out) unless its owner is past
    /// `quota`'s share or rate, or every owner together past its total, counted at
    /// `record.created_at`.
    fn create<'a>(&'a self, record: &'a TaskRecord, quota: TaskQuota) -> StoreFuture<'a, Result<(), TaskRefused>>;
    /// The owner's task.
    fn get<'a>(&'a self, owner: &'a str, task_id: &'a str) -> StoreFuture<'a, Option<TaskRecord>>;
    /// Writes `record` if the stored version is still `record.version - 1`; false on a conflict.
    fn replace<'a>(&'a self, record: &'a TaskRecord) -> StoreFuture<'a, bool>;
}

/// The in-memory task store of the local run and tests. A record is forgotten at the first
/// creation after its TTL (it has no clock of its own), as Redis forgets one at its TTL.
#[derive(Debug, Default)]
pub struct MemoryTaskStore {
    pub(crate) tasks: Mutex<HashMap<(String, String), TaskRecord>>,
    /// Per owner: the rate window and how many tasks it created in it.
    created: Mutex<HashMap<String, (u64, u32)>>,
}

impl TaskStore for MemoryTaskStore {
    fn create<'a>(&'a self, record: &'a TaskRecord, quota: TaskQuota) -> StoreFuture<'a, Result<(), TaskRefused>> {
        let now = record.created_at;
        let mut tasks = self.tasks.lock().expect("tasks lock");
        tasks.retain(|_, task| task.created_at.saturating_add(task.ttl_ms) > now);
        let outcome = (|| {
            if tasks.keys().filter(|(owner, _)| *owner == record.owner).count() >= quota.share as usize {
                return Err(TaskRefused::OverShare(quota.share));
            }
            if tasks.len() >= quota.total as usize {
                return Err(TaskRefused::OverTotal(quota.total));
            }
            let mut created = self.created.lock().expect("rate lock");
            let window = now / TASK_RATE_WINDOW_MS;
            let count = created.get(&record.owner).filter(|(w, _)| *w == window).map_or(0, |(_, n)| *n);
            if count >= quota.per_minute {
                return Err(TaskRefused::TooFast(quota.per_minute));
            }
            created.retain(|_, (w, _)| *w == window);
            created.insert(record.owner.clone(), (window, count + 1));
            tasks.insert((record.owner.clone(), record.task_id.clone()), record.clone());
            Ok(())
        })();
        Box::pin(async move { Ok(outcome) })
    }

    fn get<'a>(&'a self, owner: &'a str, task_id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        let record = self.tasks.lock().expect("tasks lock").get(&(owner.to_owned(), task_id.to_owned())).cloned();
        Box::pin(async move { Ok(record) })
    }

    fn replace<'a>(&'a self, record: &'a TaskRecord) -> StoreFuture<'a, bool> {
        let mut tasks = self.tasks.lock().expect("tasks lock");
        let key = (record.owner.clone(), record.task_id.clone());
        let ok = tasks.get(&key).is_some_and(|current| current.version + 1 == record.version);
        if ok {
            tasks.insert(key, record.clone());
        }
        Box::pin(async move { Ok(ok) })
    }
}

/// A task store for tests whose reads each answer "not there" after `delay`, counting the reads
/// made and the most in flight at once; it stores nothing.
#[cfg(test)]
pub(crate) struct SlowReads {
    delay: std::time::Duration,
    pub reads: std::sync::atomic::AtomicUsize,
    in_flight: std::sync::atomic::AtomicUsize,
    pub peak: std::sync::atomic::AtomicUsize,
    /// Whose task each read asked for, and when it reached the store, in order.
    pub started: std::sync::Mutex<Vec<(String, tokio::time::Instant)>>,
}

#[cfg(test)]
impl SlowReads {
    pub fn new(delay: std::time::Duration) -> Self {
        let (reads, in_flight, peak, started) = Default::default();
        Self { delay, reads, in_flight, peak, started }
    }
}

#[cfg(test)]
impl TaskStore for SlowReads {
    fn create<'a>(&'a self, _: &'a TaskRecord, _: TaskQuota) -> StoreFuture<'a, Result<(), TaskRefused>> {
        Box::pin(async { Ok(Ok(())) })
    }

    fn get<'a>(&'a self, owner: &'a str, _: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        use std::sync::atomic::Ordering::SeqCst;
        Box::pin(async {
            self.started.lock().unwrap().push((owner.to_owned(), tokio::time::Instant::now()));
            self.reads.fetch_add(1, SeqCst);
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.peak.fetch_max(now, SeqCst);
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, SeqCst);
            Ok(None)
        })
    }

    fn replace<'a>(&'a self, _: &'a TaskRecord) -> StoreFuture<'a, bool> {
        Box::pin(async { Ok(false) })
    }
}

/// Creates a task unless its owner, or every owner together, is past the quota. KEYS: the task,
/// the owner's held set (task ids scored by when they expire), the owner's rate counter for this
/// window, the held set of every owner. ARGV: the record, its TTL, now, the share, the rate, the
/// window, the task id (the owner's set's member), the total, and `{b64(owner)}:{taskId}` (the
/// member of every owner's set, so that the total counts what the memory store counts).
const CREATE: &str = r#"
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 'share' end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[8]) then return 'total' end
if tonumber(redis.call('GET', KEYS[3]) or '0') >= tonumber(ARGV[5]) then return 'rate' end
if redis.call('INCR', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local expires = tonumber(ARGV[3]) + tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], expires, ARGV[7])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
redis.call('ZADD', KEYS[4], expires, ARGV[9])
if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[4], ARGV[2]) end
return 'ok'
"#;

static CREATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CREATE));

const REPLACE: &str = r#"
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
if cjson.decode(raw).version + 1 ~= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
return 1
"#;

static REPLACE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REPLACE));

/// Tasks in Redis: `{prefix}:task:{b64(owner)}:{taskId}`, a JSON record with the task's TTL;
/// beside it, per owner, `{prefix}:task-held:{b64(owner)}` (the ids it holds, scored by when
/// they expire) and `{prefix}:task-rate:{b64(owner)}:{window}` (tasks created in the window),
/// and `{prefix}:task-held-all` (every owner's `{b64(owner)}:{taskId}`, scored the same way).
#[derive(Clone, Debug)]
pub struct RedisTaskStore {
    redis: Redis,
}

impl RedisTaskStore {
    /// Task records on the shared connection, under its prefix.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }

    fn key(&self, owner: &str, task_id: &str) -> String {
        format!("{}:task:{}:{}", self.redis.prefix(), URL_SAFE_NO_PAD.encode(owner), task_id)
    }

    fn held_key(&self, owner: &str) -> String {
        format!("{}:task-held:{}", self.redis.prefix(), URL_SAFE_NO_PAD.encode(owner))
    }

    fn held_by_all_key(&self) -> String {
        format!("{}:task-held-all", self.redis.prefix())
    }

    fn rate_key(&self, owner: &str, now: u64) -> String {
        format!("{}:task-rate:{}:{}", self.redis.prefix(), URL_SAFE_NO_PAD.encode(owner), now / TASK_RATE_WINDOW_MS)
    }
}

fn redis_error(error: redis::RedisError) -> StoreError {
    fault_from(&error, "task store")
}

impl TaskStore for RedisTaskStore {
    fn create<'a>(&'a self, record: &'a TaskRecord, quota: TaskQuota) -> StoreFuture<'a, Result<(), TaskRefused>> {
        Box::pin(crate::telemetry::redis_span("task.create", async move {
            let json = serde_json::to_string(record).expect("records serialise");
            let now = record.created_at;
            let outcome: String = CREATE_SCRIPT
                .key(self.key(&record.owner, &record.task_id))
                .key(self.held_key(&record.owner))
                .key(self.rate_key(&record.owner, now))
                .key(self.held_by_all_key())
                .arg(json)
                .arg(record.ttl_ms)
                .arg(now)
                .arg(quota.share)
                .arg(quota.per_minute)
                .arg(TASK_RATE_WINDOW_MS)
                .arg(&record.task_id)
                .arg(quota.total)
                .arg(format!("{}:{}", URL_SAFE_NO_PAD.encode(&record.owner), record.task_id))
                .invoke_async(&mut self.redis.connection())
                .await
                .map_err(redis_error)?;
            match outcome.as_str() {
                "ok" => Ok(Ok(())),
                "share" => Ok(Err(TaskRefused::OverShare(quota.share))),
                "total" => Ok(Err(TaskRefused::OverTotal(quota.total))),
                "rate" => Ok(Err(TaskRefused::TooFast(quota.per_minute))),
                _ => Err(StoreError::fault("task store gave an unexpected answer to a create")),
            }
        }))
    }

    fn get<'a>(&'a self, owner: &'a str, task_id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(crate::telemetry::redis_span("task.get", async move {
            let raw: Option<String> = redis::cmd("GET")
                .arg(self.key(owner, task_id))
                .query_async(&mut self.redis.connection())
                .await
                .map_err(redis_error)?;
            raw.map(|raw| {
                serde_json::from_str(&raw).map_err(|_| StoreError::fault("task store returned an unreadable record"))
            })
            .transpose()
        }))
    }

    fn replace<'a>(&'a self, record: &'a TaskRecord) -> StoreFuture<'a, bool> {
        Box::pin(crate::telemetry::redis_span("task.replace", async move {
            let json = serde_json::to_string(record).expect("records serialise");
            let ok: i64 = REPLACE_SCRIPT
                .key(self.key(&record.owner, &record.task_id))
                .arg(json)
                .arg(record.version)
                .invoke_async(&mut self.redis.connection())
                .await
                .map_err(redis_error)?;
            Ok(ok == 1)
        }))
    }
}

/// Deployed without `REDIS_URL`: every task operation fails naming the variable.
#[derive(Debug, Default)]
pub struct UnconfiguredTaskStore;

impl UnconfiguredTaskStore {
    fn fail<T: Send + 'static>(&self) -> StoreFuture<'_, T> {
        Box::pin(async { Err(redis_url_unset("tasks")) })
    }
}

impl TaskStore for UnconfiguredTaskStore {
    fn create<'a>(&'a self, _: &'a TaskRecord, _: TaskQuota) -> StoreFuture<'a, Result<(), TaskRefused>> {
        self.fail()
    }
    fn get<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.fail()
    }
    fn replace<'a>(&'a self, _: &'a TaskRecord) -> StoreFuture<'a, bool> {
        self.fail()
    }
}

/// The task store for where shared records live.
pub fn task_store(shared: &Shared) -> Arc<dyn TaskStore> {
    match shared {
        Shared::Memory => Arc::new(MemoryTaskStore::default()),
        Shared::Redis(redis) => Arc::new(RedisTaskStore::new(redis.clone())),
        Shared::Unconfigured => Arc::new(UnconfiguredTaskStore),
    }
}
