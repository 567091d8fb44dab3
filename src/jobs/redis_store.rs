//! The Redis job store: what deployments use, shared by every instance and by the consumer.
//!
//! Keys (all with a TTL; the principal is part of every job key, base64url-encoded so a `:` in
//! a subject cannot collide with another key):
//!
//! ```text
//! {prefix}:job:{b64(owner)}:{jobId}   JSON record; expires when it may be forgotten (below)
//! {prefix}:active:{b64(owner)}        ZSET of the owner's active job ids, scored by deadline
//! {prefix}:held:{b64(owner)}          ZSET of the owner's job ids, scored by when each may be forgotten
//! {prefix}:rate:{b64(owner)}:{minute} the owner's jobs created in that minute (expires after it)
//! {prefix}:index                      ZSET of every job, scored by when it may be forgotten
//! ```
//!
//! A job may be forgotten its retention after it finished, or, while active, its retention after
//! its deadline: past the deadline it reads as failed (every script and read decides that from
//! the clock), so a stuck job stays readable as `failed` for the same five minutes as any other.
//! Expiry is Redis's: record TTLs, and entries trimmed by score on every create. The sweep only
//! stores the failures early and trims the index, so a daily cron is as correct as a frequent one.
//!
//! Each operation is one Lua script, so it is atomic and costs one round trip: two instances
//! racing on one principal can neither exceed a cap nor lose an update. Scripts run on a
//! single-shard Redis (the index spans owners), which is what Vercel's Marketplace Redis is.
//! When the job queue is a Redis stream on the same connection, the create script also adds the
//! job's message (`create_enqueued`): a submit is one round trip, and a job is never stored
//! without its message (nor a message queued for a job that was refused); and the step that ends
//! a job acknowledges its stream entry (`advance_settling`), so a delivery needs no round trip of
//! its own to settle.
//! The connection is the shared [`Redis`]: opened lazily (nothing happens at start-up) and
//! re-established on a dead socket.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use redis::Script;
use std::sync::LazyLock;

use super::model::{JOB_RETENTION_MS, JobRecord};
use super::queue::{JobMessage, StreamEntry, StreamTarget};
use super::store::{Advanced, CreateRefused, JobStore, Quota, RATE_WINDOW_MS, SweepReport};
use crate::store::{Redis, StoreError, StoreFuture, fault_from};

const CREATE: &str = r#"
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 'cap' end
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[9]) then return 'share' end
if tonumber(redis.call('GET', KEYS[5]) or '0') >= tonumber(ARGV[10]) then return 'rate' end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return 'full' end
if redis.call('EXISTS', KEYS[1]) == 1 then return 'exists' end
if KEYS[6] and redis.call('XLEN', KEYS[6]) >= tonumber(ARGV[12]) then return 'queue_full' end
local forget = tonumber(ARGV[8])
local ttl = forget - now
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[6])
redis.call('ZADD', KEYS[3], forget, ARGV[7])
redis.call('ZADD', KEYS[4], forget, ARGV[6])
if redis.call('INCR', KEYS[5]) == 1 then redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[11])) end
for i = 2, 4 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
if KEYS[6] then redis.call('XADD', KEYS[6], '*', 'body', ARGV[13]) end
return 'ok'
"#;

/// Shared head of the mutating scripts: `settle` fails an active job past its deadline (as
/// `JobRecord::fail_if_stuck` does), and `store` writes `job`, moving it out of the active set
/// with a TTL that ends its retention once it is finished.
const STORE_JOB: &str = r#"
local function settle(job, now)
  if (job.state == 'pending' or job.state == 'running') and now >= job.deadline then
    job.state = 'failed'
    job.finishedAt = job.deadline
    return true
  end
  return false
end
local function store(job, now, retention)
  job.updatedAt = now
  local out = cjson.encode(job)
  if job.state == 'pending' or job.state == 'running' then
    redis.call('SET', KEYS[1], out, 'KEEPTTL')
  else
    local forget = job.finishedAt + retention
    redis.call('SET', KEYS[1], out, 'PX', math.max(forget - now, 1))
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZADD', KEYS[3], forget, ARGV[2])
    redis.call('ZADD', KEYS[4], forget, ARGV[1])
    -- The sets may have been trimmed empty (or evicted) since the create gave them their TTL:
    -- a set this write re-creates lasts as long as what it holds, never forever.
    local ttl = math.max(forget - now, 1)
    for i = 3, 4 do
      local left = redis.call('PTTL', KEYS[i])
      if left < 0 or left < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
    end
  end
  return out
end
"#;

/// Ends an active job now as `state` (a job past its deadline fails at it instead; a finished
/// one is returned as it is).
const END_ACTIVE: &str = r#"
local function end_active(state, cancel_requested)
  local raw = redis.call('GET', KEYS[1])
  if not raw then return false end
  local job = cjson.decode(raw)
  local now = tonumber(ARGV[3])
  if settle(job, now) then return store(job, now, tonumber(ARGV[4])) end
  if job.state ~= 'pending' and job.state ~= 'running' then return raw end
  job.state = state
  if cancel_requested then job.cancelRequested = true end
  job.finishedAt = now
  return store(job, now, tonumber(ARGV[4]))
end
"#;

const CANCEL: &str = "return end_active('cancelled', true)";
/// Its message given up: nothing would run it again.
const ABANDON: &str = "return end_active('failed', false)";

/// `over` settles the delivery when the job is over after this call, if the caller passed its
/// stream entry (`KEYS[5]`, group `ARGV[6]`, entry `ARGV[7]`): acknowledged and deleted with the
/// job's last write. A job that goes on keeps its entry pending.
const ADVANCE: &str = r#"
local function over(out)
  if KEYS[5] then
    redis.call('XACK', KEYS[5], ARGV[6], ARGV[7])
    redis.call('XDEL', KEYS[5], ARGV[7])
  end
  return out
end
local raw = redis.call('GET', KEYS[1])
if not raw then return over(false) end
local job = cjson.decode(raw)
local now = tonumber(ARGV[3])
if settle(job, now) then return over(store(job, now, tonumber(ARGV[4]))) end
if job.state ~= 'pending' and job.state ~= 'running' then return over(raw) end
if job.completedSteps ~= tonumber(ARGV[5]) then return raw end
if job.cancelRequested then
  job.state = 'cancelled'
  job.finishedAt = now
  return over('A' .. store(job, now, tonumber(ARGV[4])))
end
job.completedSteps = job.completedSteps + 1
job.state = 'running'
if job.completedSteps < job.totalSteps then return 'A' .. store(job, now, tonumber(ARGV[4])) end
job.state = 'done'
job.finishedAt = now
job.result = { sum = job.completedSteps * (job.completedSteps - 1) / 2, stepsRun = job.completedSteps }
return over('A' .. store(job, now, tonumber(ARGV[4])))
"#;

const FAIL_IF_STUCK: &str = r#"
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local job = cjson.decode(raw)
local now = tonumber(ARGV[3])
if not settle(job, now) then return 0 end
store(job, now, tonumber(ARGV[4]))
return 1
"#;

const DELETE: &str = r#"
local raw = redis.call('GET', KEYS[1])
if raw then
  local window = math.floor(cjson.decode(raw).createdAt / tonumber(ARGV[3]))
  if window == tonumber(ARGV[4]) and tonumber(redis.call('GET', KEYS[5]) or '0') > 0 then
    redis.call('DECR', KEYS[5])
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[1])
return 1
"#;

static CREATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CREATE));
static CANCEL_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{STORE_JOB}{END_ACTIVE}{CANCEL}")));
static ABANDON_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{STORE_JOB}{END_ACTIVE}{ABANDON}")));
static ADVANCE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{STORE_JOB}{ADVANCE}")));
static FAIL_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{STORE_JOB}{FAIL_IF_STUCK}")));
static DELETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DELETE));

/// Job records in Redis.
#[derive(Clone)]
pub struct RedisJobStore {
    redis: Redis,
}

impl std::fmt::Debug for RedisJobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisJobStore").field("prefix", &self.redis.prefix()).finish_non_exhaustive()
    }
}

fn store_error(error: redis::RedisError) -> StoreError {
    fault_from(&error, "job store")
}

impl RedisJobStore {
    /// Job records on the shared connection, under its prefix.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }

    /// The owner as it appears in key names. Encoded once per call and passed to the key
    /// builders below, which join their parts rather than `format!` them: a script call names
    /// five keys, and formatting cost ≈ 1.3k instructions a key.
    fn owner_part(owner: &str) -> String {
        URL_SAFE_NO_PAD.encode(owner)
    }

    fn job_key(&self, owner_part: &str, job_id: &str) -> String {
        [self.redis.prefix(), "job", owner_part, job_id].join(":")
    }

    fn active_key(&self, owner_part: &str) -> String {
        [self.redis.prefix(), "active", owner_part].join(":")
    }

    fn index_key(&self) -> String {
        [self.redis.prefix(), "index"].join(":")
    }

    fn held_key(&self, owner_part: &str) -> String {
        [self.redis.prefix(), "held", owner_part].join(":")
    }

    /// The owner's per-minute rate key for the window holding `now`.
    fn rate_key(&self, owner_part: &str, now: u64) -> String {
        [self.redis.prefix(), "rate", owner_part, &(now / RATE_WINDOW_MS).to_string()].join(":")
    }

    fn index_member(owner_part: &str, job_id: &str) -> String {
        [owner_part, job_id].join(":")
    }

    async fn mutate(
        &self,
        script: &Script,
        owner: &str,
        job_id: &str,
        now: u64,
    ) -> Result<Option<JobRecord>, StoreError> {
        let raw = self.mutate_raw(script, owner, job_id, now, None).await?;
        raw.map(|raw| parse(&raw)).transpose()
    }

    /// Runs a mutating script; its answer, unparsed. `advance` is what only the advance script
    /// takes: the expected step count (`ARGV[5]`) and the stream entry it may settle (`KEYS[5]`,
    /// `ARGV[6..7]`), which therefore never comes without the count.
    async fn mutate_raw(
        &self,
        script: &Script,
        owner: &str,
        job_id: &str,
        now: u64,
        advance: Option<(u32, Option<StreamEntry<'_>>)>,
    ) -> Result<Option<String>, StoreError> {
        let owner = Self::owner_part(owner);
        let mut invocation = script.key(self.job_key(&owner, job_id));
        invocation
            .key(self.active_key(&owner))
            .key(self.index_key())
            .key(self.held_key(&owner))
            .arg(job_id)
            .arg(Self::index_member(&owner, job_id))
            .arg(now)
            .arg(JOB_RETENTION_MS);
        if let Some((expected, entry)) = advance {
            invocation.arg(expected);
            if let Some(entry) = entry {
                invocation.key(entry.target.stream).arg(entry.group).arg(entry.id);
            }
        }
        invocation.invoke_async(&mut self.redis.connection()).await.map_err(store_error)
    }

    async fn run_advance(
        &self,
        owner: &str,
        job_id: &str,
        expected: u32,
        now: u64,
        entry: Option<StreamEntry<'_>>,
    ) -> Result<Option<Advanced>, StoreError> {
        // The script marks a record it changed with a leading `A`; a record it only read
        // (the step was applied already, or the job is over) comes back as it is.
        let raw = self.mutate_raw(&ADVANCE_SCRIPT, owner, job_id, now, Some((expected, entry))).await?;
        raw.map(|raw| match raw.strip_prefix('A') {
            Some(changed) => parse(changed).map(|record| Advanced { record, applied: true }),
            None => parse(&raw).map(|record| Advanced { record, applied: false }),
        })
        .transpose()
    }
}

impl RedisJobStore {
    /// The create script; with a stream, the message is added in the same step (after every
    /// check, including the stream's bound, has passed).
    async fn run_create(
        &self,
        record: &JobRecord,
        quota: &Quota,
        now: u64,
        enqueue: Option<(StreamTarget<'_>, &JobMessage)>,
    ) -> Result<Result<(), CreateRefused>, StoreError> {
        let json = serde_json::to_string(record).expect("records serialise");
        let owner = Self::owner_part(&record.owner_id);
        let mut invocation = CREATE_SCRIPT.key(self.job_key(&owner, &record.job_id));
        invocation
            .key(self.active_key(&owner))
            .key(self.index_key())
            .key(self.held_key(&owner))
            .key(self.rate_key(&owner, now))
            .arg(json)
            .arg(now)
            .arg(quota.active)
            .arg(quota.total)
            .arg(record.deadline)
            .arg(&record.job_id)
            .arg(Self::index_member(&owner, &record.job_id))
            .arg(record.forget_at())
            .arg(quota.share)
            .arg(quota.per_minute)
            .arg(RATE_WINDOW_MS);
        if let Some((stream, message)) = enqueue {
            invocation.key(stream.stream).arg(stream.max_len).arg(message.body());
        }
        let outcome: String = invocation.invoke_async(&mut self.redis.connection()).await.map_err(store_error)?;
        Ok(match outcome.as_str() {
            "ok" => Ok(()),
            "cap" => Err(CreateRefused::AtCap(quota.active)),
            "share" => Err(CreateRefused::OverShare(quota.share)),
            "rate" => Err(CreateRefused::TooFast(quota.per_minute)),
            "full" => Err(CreateRefused::Full),
            "queue_full" => Err(CreateRefused::QueueFull(enqueue.map_or(0, |(stream, _)| stream.max_len))),
            "exists" => Err(CreateRefused::Exists),
            // Not a refusal this code knows (a script edited without its reader): a fault, not
            // "that id exists", which would have the submit retry with fresh ids.
            _ => return Err(StoreError::fault("the job store answered a create with something unexpected")),
        })
    }
}

fn parse(raw: &str) -> Result<JobRecord, StoreError> {
    serde_json::from_str(raw).map_err(|_| StoreError::fault("job store returned an unreadable record"))
}

impl JobStore for RedisJobStore {
    fn create<'a>(
        &'a self,
        record: &'a JobRecord,
        quota: &'a Quota,
        now: u64,
    ) -> StoreFuture<'a, Result<(), CreateRefused>> {
        Box::pin(crate::telemetry::redis_span("job.create", self.run_create(record, quota, now, None)))
    }

    fn create_enqueued<'a>(
        &'a self,
        record: &'a JobRecord,
        quota: &'a Quota,
        now: u64,
        stream: StreamTarget<'a>,
        message: &'a JobMessage,
    ) -> Option<StoreFuture<'a, Result<(), CreateRefused>>> {
        // One script may only touch keys of the server it runs on.
        if !stream.redis.is_same_connection(&self.redis) {
            return None;
        }
        let create = self.run_create(record, quota, now, Some((stream, message)));
        Some(Box::pin(crate::telemetry::redis_span("job.create", create)))
    }

    fn get<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>> {
        Box::pin(crate::telemetry::redis_span("job.get", async move {
            let raw: Option<String> = redis::cmd("GET")
                .arg(self.job_key(&Self::owner_part(owner), job_id))
                .query_async(&mut self.redis.connection())
                .await
                .map_err(store_error)?;
            // A read stays one GET: a stuck job is failed in the copy returned, and stored as
            // failed by the next write or sweep (both reach the same record).
            let mut record = raw.map(|raw| parse(&raw)).transpose()?;
            if let Some(record) = &mut record {
                record.fail_if_stuck(now);
            }
            Ok(record)
        }))
    }

    fn cancel<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>> {
        Box::pin(crate::telemetry::redis_span("job.cancel", self.mutate(&CANCEL_SCRIPT, owner, job_id, now)))
    }

    fn abandon<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>> {
        Box::pin(crate::telemetry::redis_span("job.abandon", self.mutate(&ABANDON_SCRIPT, owner, job_id, now)))
    }

    fn advance<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        expected: u32,
        now: u64,
    ) -> StoreFuture<'a, Option<Advanced>> {
        Box::pin(crate::telemetry::redis_span("job.advance", self.run_advance(owner, job_id, expected, now, None)))
    }

    fn advance_settling<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        expected: u32,
        now: u64,
        entry: StreamEntry<'a>,
    ) -> Option<StoreFuture<'a, Option<Advanced>>> {
        // One script may only touch keys of the server it runs on.
        if !entry.target.redis.is_same_connection(&self.redis) {
            return None;
        }
        let advance = self.run_advance(owner, job_id, expected, now, Some(entry));
        Some(Box::pin(crate::telemetry::redis_span("job.advance", advance)))
    }

    fn delete<'a>(&'a self, record: &'a JobRecord) -> StoreFuture<'a, ()> {
        Box::pin(crate::telemetry::redis_span("job.delete", async move {
            let (owner, job_id) = (Self::owner_part(&record.owner_id), &record.job_id);
            let _: i64 = DELETE_SCRIPT
                .key(self.job_key(&owner, job_id))
                .key(self.active_key(&owner))
                .key(self.index_key())
                .key(self.held_key(&owner))
                // The rate key of the window the job was created in, declared as every key a
                // script touches must be; the script decrements it only if the stored record
                // says it was created in that window.
                .key(self.rate_key(&owner, record.created_at))
                .arg(job_id)
                .arg(Self::index_member(&owner, job_id))
                .arg(RATE_WINDOW_MS)
                .arg(record.created_at / RATE_WINDOW_MS)
                .invoke_async(&mut self.redis.connection())
                .await
                .map_err(store_error)?;
            Ok(())
        }))
    }

    fn sweep(&self, now: u64) -> StoreFuture<'_, SweepReport> {
        Box::pin(async move {
            let mut connection = self.redis.connection();
            // Index scores are when a job may be forgotten: retention after it finished, or after
            // the deadline while it is active. So every job that may be stuck scores at most
            // `now + retention`, and so does every finished one (at most 256 in all).
            let due: Vec<String> = redis::cmd("ZRANGE")
                .arg(self.index_key())
                .arg("-inf")
                .arg(now + JOB_RETENTION_MS)
                .arg("BYSCORE")
                .query_async(&mut connection)
                .await
                .map_err(store_error)?;
            let mut failed_stuck = 0;
            for member in &due {
                let Some((owner, job_id)) = member.split_once(':') else { continue };
                // Only a member this store wrote names keys: the owner part must decode (to
                // UTF-8, as a principal id is), and then it is used as it is.
                if URL_SAFE_NO_PAD.decode(owner).ok().and_then(|o| String::from_utf8(o).ok()).is_none() {
                    continue;
                }
                let failed: i64 = FAIL_SCRIPT
                    .key(self.job_key(owner, job_id))
                    .key(self.active_key(owner))
                    .key(self.index_key())
                    .key(self.held_key(owner))
                    .arg(job_id)
                    .arg(member)
                    .arg(now)
                    .arg(JOB_RETENTION_MS)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(store_error)?;
                failed_stuck += failed as u32;
            }
            let evicted: u32 = redis::cmd("ZREMRANGEBYSCORE")
                .arg(self.index_key())
                .arg("-inf")
                .arg(now)
                .query_async(&mut connection)
                .await
                .map_err(store_error)?;
            Ok(SweepReport { evicted, failed_stuck })
        })
    }
}
