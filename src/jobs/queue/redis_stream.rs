//! [`RedisStreamQueue`]: jobs that survive any instance off Vercel. The queue is a Redis stream
//! with one consumer group; every instance is a consumer of it.
//!
//! ```text
//! {prefix}:queue:jobs        the stream: one entry per job message (field `body`), deleted
//!                            once acknowledged, so its length is the backlog
//! {prefix}:queue:jobs:dead   dead letters: messages that can never run, or failed too often
//!                             (their jobs failed; kept a week after the last one)
//! ```
//!
//! A message is added with its bound checked first (`XLEN`, then `XADD`): by the job store's create
//! script when the store shares this queue's connection (a full stream then stores nothing), else
//! by this queue's own publishing script, after which a refused job's record is rolled back. Each instance reads new entries with
//! `XREADGROUP` on a connection of its own (the read blocks), runs each through the same
//! [`Consumer::run`] as a Vercel Queues push (validation, compare-and-set steps, cancel between
//! steps), and acknowledges (`XACK` and `XDEL`) only after the job's steps are stored: in the
//! script that stores the last step when the job store shares this queue's connection, else in
//! a script of its own. While it works it keeps its entries fresh (`XCLAIM … JUSTID`), so a long job is not
//! taken over. An entry whose consumer died stays pending; once it has been idle for the
//! reclaim time, any instance claims it (`XCLAIM`) and resumes from the stored record, so no
//! step runs twice. A message delivered more times than the limit goes to the dead-letter
//! stream, and its job is failed. On shutdown an instance stops reading and hands back what it holds (the entry is
//! added again and the old one removed, in one script), so another instance resumes it at once;
//! a delivery whose time budget ran out mid-job hands its entry back the same way, so a long job
//! is never counted as failing. An instance that stops holding nothing leaves the group.

use redis::Script;
use redis::aio::ConnectionManager;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

use super::{
    Confirmation, JobMessage, Lease, PublishError, PublishFuture, Publisher, QueueApi, QueueFuture, StreamEntry,
    StreamTarget, queue_full_refusal,
};
use crate::jobs::consumer::{Consumer, Processed};
use crate::jobs::model::JOBS_TOPIC;
use crate::store::Redis;

/// How the stream queue behaves (`MCP_QUEUE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSettings {
    /// Messages the stream holds before it refuses more.
    pub max_len: u32,
    /// How long an entry may sit unacknowledged, its consumer silent, before another takes it.
    pub reclaim_idle: Duration,
    /// Deliveries after which a message goes to the dead-letter stream.
    pub max_deliveries: u32,
    /// Deliveries one instance works on at once.
    pub concurrency: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self { max_len: 10_000, reclaim_idle: Duration::from_secs(30), max_deliveries: 5, concurrency: 4 }
    }
}

/// The consumer group every instance belongs to.
pub const STREAM_CONSUMER_GROUP: &str = "jobs";

/// How long one read waits for new entries before the worker looks around (shutdown, reclaim).
const READ_BLOCK: Duration = Duration::from_millis(1000);

/// The pause after a failed read (Redis unreachable) before the next.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Dead letters kept, at most (older ones are trimmed), and for how long after the last one
/// (they carry owner ids, which nothing else keeps longer than a day).
const DEAD_LETTERS_KEPT: u32 = 10_000;
const DEAD_LETTERS_KEPT_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// How often a worker removes the consumers of processes that were killed, and how long such a
/// consumer has been silent first.
const PRUNE_EVERY: Duration = Duration::from_secs(300);
const PRUNE_SILENT: Duration = Duration::from_secs(3600);

const PUBLISH: &str = r#"
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return false end
return redis.call('XADD', KEYS[1], '*', 'body', ARGV[2])
"#;

const ACK: &str = r#"
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
"#;

/// Whether entry `ARGV[2]` is pending with consumer `ARGV[3]` (group `ARGV[1]`): a consumer that
/// stalled past the reclaim time may find another holding it now, and must leave it alone.
const HELD_BY_ME: &str = r#"
local function held_by_me()
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
  return #pending == 1 and pending[1][2] == ARGV[3]
end
"#;

/// Keeps an entry this consumer holds from looking idle (`JUSTID`: no delivery is counted).
const TOUCH: &str = r#"
if not held_by_me() then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
"#;

/// Hands an entry this consumer holds back: the same fields as a new entry (which any instance's
/// read picks up at once), and the old one acknowledged and deleted, in one step.
const HAND_BACK: &str = r#"
if not held_by_me() then return 0 end
local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #entry == 0 then return 0 end
redis.call('XADD', KEYS[1], '*', unpack(entry[1][2]))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
"#;

/// Moves an entry to the dead letters, if this consumer could claim it (it is still pending and
/// has been idle at least `ARGV[3]` ms, or `ARGV[3]` is 0 for an entry this consumer holds). An
/// entry it could not claim is left alone: its consumer touched it since it was listed, so it is
/// alive and will settle it (acknowledging it here would leave it in the stream with nobody to
/// reclaim it). An entry deleted from the stream is only dropped from the pending list.
const DEAD_LETTER: &str = r#"
local claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if #claimed == 0 then return 0 end
-- An entry deleted from the stream comes back as a nil, or as its id without fields, depending on
-- the Redis version (7.0 leaves it out and unlists it itself): it is only dropped from the list.
if not claimed[1] or not claimed[1][2] then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[4])
  return 0
end
local fields = claimed[1][2]
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'id', ARGV[4], 'reason', ARGV[5], unpack(fields))
redis.call('PEXPIRE', KEYS[2], ARGV[7])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[4])
redis.call('XDEL', KEYS[1], ARGV[4])
return 1
"#;

/// Removes this consumer from the group when it holds nothing (after a shutdown handed its work
/// back), so the group's list of consumers does not grow by one with every process that ever ran.
/// A consumer still holding entries stays: deleting it would make them unclaimable.
const LEAVE: &str = r#"
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
"#;

/// Removes the group's consumers that hold nothing and have been silent for `ARGV[2]` ms, other
/// than the caller (`ARGV[3]`): processes killed before they could leave. A live consumer reads
/// every second, so it is never this silent; were one removed, its next read would add it back.
const PRUNE: &str = r#"
local removed = 0
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local fields = {}
  for i = 1, #consumer, 2 do fields[consumer[i]] = consumer[i + 1] end
  if fields['pending'] == 0 and fields['idle'] >= tonumber(ARGV[2]) and fields['name'] ~= ARGV[3] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], fields['name'])
    removed = removed + 1
  end
end
return removed
"#;

static PUBLISH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PUBLISH));
static PRUNE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PRUNE));
static LEAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE));
static ACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACK));
static DEAD_LETTER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DEAD_LETTER));
static HAND_BACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{HELD_BY_ME}{HAND_BACK}")));
static TOUCH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{HELD_BY_ME}{TOUCH}")));

/// One stream entry: its id and its fields, flat (`field, value, …`).
type Entry = (String, Vec<Vec<u8>>);

/// The Redis Streams job queue of one instance.
pub struct RedisStreamQueue {
    redis: Redis,
    stream: String,
    dead: String,
    consumer_name: String,
    settings: StreamSettings,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for RedisStreamQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStreamQueue")
            .field("stream", &self.stream)
            .field("consumer", &self.consumer_name)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RedisStreamQueue {
    /// The jobs stream under `redis`'s prefix; this instance reads as `consumer_name` (unique
    /// per process: a restarted process is a new consumer, and what the old one held is
    /// reclaimed).
    pub fn new(redis: Redis, consumer_name: impl Into<String>, settings: StreamSettings) -> Self {
        let stream = format!("{}:queue:{JOBS_TOPIC}", redis.prefix());
        Self {
            dead: format!("{stream}:dead"),
            stream,
            redis,
            consumer_name: consumer_name.into(),
            settings,
            stop: watch::channel(false).0,
        }
    }

    /// The stream's key.
    pub fn stream_key(&self) -> &str {
        &self.stream
    }

    /// The dead-letter stream's key.
    pub fn dead_letter_key(&self) -> &str {
        &self.dead
    }

    fn target(&self) -> StreamTarget<'_> {
        StreamTarget { redis: &self.redis, stream: &self.stream, max_len: self.settings.max_len }
    }

    /// Stops reading: the worker hands back what it holds and ends.
    pub fn shut_down(&self) {
        self.stop.send_replace(true);
    }

    /// Runs the worker until [`RedisStreamQueue::shut_down`]: reads, reclaims, runs and
    /// acknowledges. Resolves once everything it held is settled or handed back.
    pub async fn work(self: Arc<Self>, consumer: Arc<Consumer>) {
        let Ok(reader) = self.redis.dedicated(READ_BLOCK + Duration::from_secs(2)) else { return };
        let slots = Arc::new(Semaphore::new(self.settings.concurrency.max(1)));
        let stop = self.stop.subscribe();
        let reclaim_every = (self.settings.reclaim_idle / 2).max(Duration::from_millis(50));
        let mut next_reclaim = tokio::time::Instant::now();
        // Not at once: a fleet restarting together would all prune at the same moment.
        let mut next_prune = tokio::time::Instant::now() + PRUNE_EVERY;
        let mut tasks = tokio::task::JoinSet::new();
        let mut group_ready = false;
        while !*stop.borrow() {
            if !group_ready {
                group_ready = self.ensure_group().await.is_ok();
            }
            let free = slots.available_permits();
            // Reads are never cancelled midway: an entry Redis handed over would otherwise sit
            // unseen in this consumer's pending list until the reclaim time.
            let entries = if tokio::time::Instant::now() >= next_reclaim {
                next_reclaim = tokio::time::Instant::now() + reclaim_every;
                if tokio::time::Instant::now() >= next_prune {
                    next_prune = tokio::time::Instant::now() + PRUNE_EVERY;
                    let _ = self.prune(PRUNE_SILENT).await;
                }
                self.reclaim(free, &consumer).await
            } else {
                self.read(reader.clone(), free).await
            };
            let entries = match entries {
                Ok(entries) => entries,
                Err(_) => {
                    // Redis is unreachable, or lost the group (restarted without its data).
                    group_ready = false;
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            for (id, fields) in entries {
                if *stop.borrow() {
                    let _ = self.hand_back(&id).await;
                    continue;
                }
                let Ok(slot) = slots.clone().acquire_owned().await else { break };
                let (queue, consumer, stop) = (self.clone(), consumer.clone(), stop.clone());
                tasks.spawn(async move {
                    queue.deliver(&consumer, &id, &fields, stop).await;
                    drop(slot);
                });
            }
            while tasks.try_join_next().is_some() {}
            if slots.available_permits() == 0 {
                // Every slot busy: wait for one before reading more.
                let _ = slots.acquire().await;
            }
        }
        while tasks.join_next().await.is_some() {}
        let _ = self.leave().await;
    }

    /// Leaves the group if this consumer holds nothing (see [`LEAVE`]); 1 when it left.
    async fn leave(&self) -> redis::RedisResult<i64> {
        LEAVE_SCRIPT
            .key(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg(&self.consumer_name)
            .invoke_async(&mut self.redis.connection())
            .await
    }

    /// Removes the consumers that hold nothing and have been silent `silent` (see [`PRUNE`]);
    /// how many it removed.
    async fn prune(&self, silent: Duration) -> redis::RedisResult<i64> {
        PRUNE_SCRIPT
            .key(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg(silent.as_millis() as u64)
            .arg(&self.consumer_name)
            .invoke_async(&mut self.redis.connection())
            .await
    }

    /// Creates the group (from the stream's start, so messages published before any instance
    /// started are delivered); a group that exists is fine.
    async fn ensure_group(&self) -> redis::RedisResult<()> {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.redis.connection())
            .await;
        match created {
            Err(error) if error.code() == Some("BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    /// New entries, up to `count`, waiting up to [`READ_BLOCK`] for one.
    async fn read(&self, mut reader: ConnectionManager, count: usize) -> redis::RedisResult<Vec<Entry>> {
        let reply: Option<Vec<(String, Vec<Entry>)>> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(STREAM_CONSUMER_GROUP)
            .arg(&self.consumer_name)
            .arg("COUNT")
            .arg(count.max(1))
            .arg("BLOCK")
            .arg(READ_BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.stream)
            .arg(">")
            .query_async(&mut reader)
            .await?;
        Ok(reply.into_iter().flatten().flat_map(|(_, entries)| entries).collect())
    }

    /// Entries idle past the reclaim time (their consumer died, or handed them back), claimed
    /// for this instance, up to `count`; those delivered too often go to the dead letters, and
    /// their jobs are failed (`consumer`'s store): nothing will run them again, and left active
    /// they would hold a place among their owner's active jobs until their deadline.
    async fn reclaim(&self, count: usize, consumer: &Consumer) -> redis::RedisResult<Vec<Entry>> {
        let idle = self.settings.reclaim_idle.as_millis() as u64;
        // [id, consumer, idle ms, deliveries] of each entry idle long enough.
        let pending: Vec<(String, String, u64, u32)> = redis::cmd("XPENDING")
            .arg(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg("IDLE")
            .arg(idle)
            .arg("-")
            .arg("+")
            .arg(count.max(1))
            .query_async(&mut self.redis.connection())
            .await?;
        let mut claimable = Vec::new();
        for (id, _, _, deliveries) in pending {
            if deliveries >= self.settings.max_deliveries {
                // Taken first, if it is still idle (its consumer may have touched it since it was
                // listed: then it is alive and running the job, which is left alone). Then the job
                // is failed, and only then the entry moves: a process that dies in between leaves
                // the entry pending, for a later reclaim to take, fail (a failed job stays failed)
                // and move. Moved first, it left a job holding its owner's slot until its
                // deadline, with no entry left to end it.
                if self.take_idle(&id, idle).await? {
                    if let Some(message) = self.message_of(&id).await? {
                        consumer.give_up(&message).await;
                    }
                    self.dead_letter(&id, 0, "delivered too often").await?;
                }
            } else {
                claimable.push(id);
            }
        }
        if claimable.is_empty() {
            return Ok(Vec::new());
        }
        let claimed: Vec<Option<Entry>> = redis::cmd("XCLAIM")
            .arg(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg(&self.consumer_name)
            .arg(idle)
            .arg(&claimable)
            .query_async(&mut self.redis.connection())
            .await?;
        Ok(claimed.into_iter().flatten().collect())
    }

    /// Runs one entry and settles it: acknowledged once its job is finished (or cannot be run),
    /// left pending when the work stopped short (a store failure, a deferral, a shutdown).
    async fn deliver(&self, consumer: &Consumer, id: &str, fields: &[Vec<u8>], mut stop: watch::Receiver<bool>) {
        let body = fields.chunks(2).find(|pair| pair[0] == b"body").and_then(|pair| pair.get(1));
        let Some(message) = body.and_then(|body| JobMessage::parse(body)) else {
            // It can never run: no retries.
            let _ = self.dead_letter(id, 0, "not a job message").await;
            return;
        };
        if *stop.borrow() {
            let _ = self.hand_back(id).await;
            return;
        }
        let mut heartbeat = tokio::time::interval((self.settings.reclaim_idle / 3).max(Duration::from_millis(20)));
        heartbeat.tick().await;
        let entry = StreamEntry { target: self.target(), group: STREAM_CONSUMER_GROUP, id };
        let run = consumer.run_settling(&message, Some(entry));
        tokio::pin!(run);
        let outcome = loop {
            tokio::select! {
                outcome = &mut run => break Some(outcome),
                _ = heartbeat.tick() => { let _ = self.touch(id).await; }
                _ = stop.changed() => break None,
            }
        };
        match outcome {
            // The job's last step acknowledged the entry.
            Some(Ok((_, true))) => {}
            Some(Ok((Processed::Finished(_) | Processed::Skipped(_), false))) => {
                // Not acknowledged if this fails: the entry is reclaimed, and the job reads as done.
                let _: redis::RedisResult<i64> = ACK_SCRIPT
                    .key(&self.stream)
                    .arg(STREAM_CONSUMER_GROUP)
                    .arg(id)
                    .invoke_async(&mut self.redis.connection())
                    .await;
            }
            // The delivery's time budget ran out mid-job: back on the stream at once as a new
            // entry, so running long is not counted as a failed delivery (the job's deadline
            // bounds it); the next read anywhere resumes from the stored record.
            Some(Ok((Processed::Deferred { .. }, false))) => {
                let _ = self.hand_back(id).await;
            }
            // A store failure: left pending, reclaimed after the reclaim time and counted.
            Some(Err(_)) => {}
            // Shutting down: hand it back now rather than after the reclaim time.
            None => {
                let _ = self.hand_back(id).await;
            }
        }
    }

    /// Resets an entry's idle time, so no other instance takes over work in progress.
    async fn touch(&self, id: &str) -> redis::RedisResult<i64> {
        TOUCH_SCRIPT
            .key(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg(id)
            .arg(&self.consumer_name)
            .invoke_async(&mut self.redis.connection())
            .await
    }

    /// Puts an entry this instance holds back on the stream as a new entry, which the next read
    /// anywhere picks up (the job resumes from its stored record).
    async fn hand_back(&self, id: &str) -> redis::RedisResult<i64> {
        HAND_BACK_SCRIPT
            .key(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg(id)
            .arg(&self.consumer_name)
            .invoke_async(&mut self.redis.connection())
            .await
    }

    /// Takes entry `id` for this consumer if it has been idle `min_idle_ms` (its deliveries not
    /// counted again); whether it did.
    async fn take_idle(&self, id: &str, min_idle_ms: u64) -> redis::RedisResult<bool> {
        let taken: Vec<String> = redis::cmd("XCLAIM")
            .arg(&self.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg(&self.consumer_name)
            .arg(min_idle_ms)
            .arg(id)
            .arg("JUSTID")
            .query_async(&mut self.redis.connection())
            .await?;
        Ok(!taken.is_empty())
    }

    /// The job message of stream entry `id`, if it is still there and holds one.
    async fn message_of(&self, id: &str) -> redis::RedisResult<Option<JobMessage>> {
        let found: Vec<Entry> =
            redis::cmd("XRANGE").arg(&self.stream).arg(id).arg(id).query_async(&mut self.redis.connection()).await?;
        Ok(found.into_iter().next().and_then(|(_, fields)| {
            let body = fields.chunks(2).find(|pair| pair[0] == b"body").and_then(|pair| pair.get(1))?;
            JobMessage::parse(body)
        }))
    }

    async fn dead_letter(&self, id: &str, min_idle_ms: u64, reason: &str) -> redis::RedisResult<i64> {
        DEAD_LETTER_SCRIPT
            .key(&self.stream)
            .key(&self.dead)
            .arg(STREAM_CONSUMER_GROUP)
            .arg(&self.consumer_name)
            .arg(min_idle_ms)
            .arg(id)
            .arg(reason)
            .arg(DEAD_LETTERS_KEPT)
            .arg(DEAD_LETTERS_KEPT_MS)
            .invoke_async(&mut self.redis.connection())
            .await
    }
}

impl Publisher for RedisStreamQueue {
    fn publish<'a>(&'a self, message: &'a JobMessage, _oidc_token: Option<&'a str>) -> PublishFuture<'a> {
        Box::pin(crate::telemetry::redis_span("queue.publish", async move {
            let added: Option<String> = PUBLISH_SCRIPT
                .key(&self.stream)
                .arg(self.settings.max_len)
                .arg(message.body())
                .invoke_async(&mut self.redis.connection())
                .await
                .map_err(|error| {
                    PublishError::Failed(crate::store::fault_from(&error, "job queue").message().into())
                })?;
            match added {
                Some(_) => Ok(()),
                None => Err(PublishError::Full(queue_full_refusal(self.settings.max_len))),
            }
        }))
    }

    fn redis_stream(&self) -> Option<StreamTarget<'_>> {
        Some(self.target())
    }
}

/// Deliveries of this queue are pulled, never pushed: a push to the consumer route is refused.
impl QueueApi for RedisStreamQueue {
    fn consumer_group(&self) -> &str {
        STREAM_CONSUMER_GROUP
    }

    fn confirm<'a>(&'a self, _: &'a Lease, _: Duration) -> QueueFuture<'a, Confirmation> {
        Box::pin(async { Ok(Confirmation::Unknown) })
    }

    fn ack<'a>(&'a self, _: &'a Lease) -> QueueFuture<'a, ()> {
        Box::pin(async { Err("this queue acknowledges its own deliveries".to_owned()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Redis the tests use (`TEST_REDIS_URL`, else the machine's, as the integration tests
    /// find it), answering `PING`; `None` only when `MCP_TEST_SKIP_REDIS=1` allows going without.
    async fn redis(name: &str) -> Option<Redis> {
        let url = std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let redis = Redis::connect(&url, &format!("unit-{name}-{}-{nanos}", std::process::id()));
        let answering = match &redis {
            Ok(redis) => redis::cmd("PING").query_async::<String>(&mut redis.connection()).await.is_ok(),
            Err(_) => false,
        };
        if !answering {
            let skip = std::env::var("MCP_TEST_SKIP_REDIS").as_deref() == Ok("1");
            assert!(skip, "{name}: Redis is required at {url} (or set MCP_TEST_SKIP_REDIS=1)");
            // Recorded where the test command's summary of skips reads it, as the integration
            // tests' skips are: a passing test's output is hidden.
            use std::io::Write;
            let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-skips.log");
            if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
                let _ = writeln!(file, "SKIPPED {name}: no Redis at {url}");
            }
            return None;
        }
        redis.ok()
    }

    /// The group's pending entries: id, consumer, idle ms, deliveries.
    async fn pending_entries(queue: &RedisStreamQueue) -> Vec<(String, String, u64, u32)> {
        redis::cmd("XPENDING")
            .arg(&queue.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg("-")
            .arg("+")
            .arg(10)
            .query_async(&mut queue.redis.connection())
            .await
            .unwrap()
    }

    /// Adds an entry to `queue`'s stream and reads it as `consumer`, which then holds it: its id.
    async fn handed_to(queue: &RedisStreamQueue, consumer: &str) -> String {
        let mut connection = queue.redis.connection();
        let id: String = redis::cmd("XADD")
            .arg(&queue.stream)
            .arg("*")
            .arg("body")
            .arg("{}")
            .query_async(&mut connection)
            .await
            .unwrap();
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(STREAM_CONSUMER_GROUP)
            .arg(consumer)
            .arg("STREAMS")
            .arg(&queue.stream)
            .arg(">")
            .query_async(&mut connection)
            .await
            .unwrap();
        id
    }

    /// The consumers of killed processes are removed once silent long enough, unless they hold
    /// an entry (deleting them would make it unclaimable); the pruning instance stays.
    #[tokio::test]
    async fn silent_consumers_holding_nothing_are_pruned() {
        let Some(redis) = redis("prune").await else { return };
        let queue = RedisStreamQueue::new(redis.clone(), "pruner", StreamSettings::default());
        queue.ensure_group().await.unwrap();
        let mut connection = redis.connection();
        for name in ["pruner", "ghost", "holder"] {
            let _: i64 = redis::cmd("XGROUP")
                .arg("CREATECONSUMER")
                .arg(&queue.stream)
                .arg(STREAM_CONSUMER_GROUP)
                .arg(name)
                .query_async(&mut connection)
                .await
                .unwrap();
        }
        handed_to(&queue, "holder").await;
        let names = || {
            let mut connection = redis.connection();
            let stream = queue.stream.clone();
            async move {
                let consumers: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(&stream)
                    .arg(STREAM_CONSUMER_GROUP)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                let mut names: Vec<String> = consumers
                    .iter()
                    .map(|c| redis::from_redis_value(c.get("name").unwrap().clone()).unwrap())
                    .collect();
                names.sort();
                names
            }
        };
        assert_eq!(queue.prune(Duration::from_secs(60)).await.unwrap(), 0, "none silent for a minute");
        // Redis's own clock decides how long a consumer has been silent.
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(queue.prune(Duration::from_millis(100)).await.unwrap(), 1);
        assert_eq!(names().await, ["holder", "pruner"], "the silent one holding nothing is gone");
    }

    /// A consumer that stalled past the reclaim time, and whose entry another has taken since,
    /// leaves it alone: its heartbeat does not take it back, and its hand-back neither re-adds nor
    /// deletes it (either would have two deliveries run at once). An entry it still holds, it
    /// keeps and hands back.
    #[tokio::test]
    async fn a_stalled_consumer_leaves_alone_what_another_has_taken() {
        let Some(redis) = redis("stalled-owner").await else { return };
        let queue = RedisStreamQueue::new(redis.clone(), "owner", StreamSettings::default());
        queue.ensure_group().await.unwrap();
        let mut connection = redis.connection();
        let holder = |id: String| {
            let (stream, mut connection) = (queue.stream.clone(), redis.connection());
            async move {
                let pending: Vec<(String, String, u64, u32)> = redis::cmd("XPENDING")
                    .arg(&stream)
                    .arg(STREAM_CONSUMER_GROUP)
                    .arg(&id)
                    .arg(&id)
                    .arg(1)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                pending.first().map(|(_, consumer, _, _)| consumer.clone())
            }
        };
        let taken = handed_to(&queue, "owner").await;
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg(&queue.stream)
            .arg(STREAM_CONSUMER_GROUP)
            .arg("thief")
            .arg(0)
            .arg(&taken)
            .arg("JUSTID")
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(queue.touch(&taken).await.unwrap(), 0);
        assert_eq!(holder(taken.clone()).await.as_deref(), Some("thief"), "the heartbeat took nothing back");
        assert_eq!(queue.hand_back(&taken).await.unwrap(), 0);
        let length: u64 = redis::cmd("XLEN").arg(&queue.stream).query_async(&mut connection).await.unwrap();
        assert_eq!(length, 1, "neither re-added nor deleted");
        assert_eq!(holder(taken).await.as_deref(), Some("thief"));

        let kept = handed_to(&queue, "owner").await;
        assert_eq!(queue.touch(&kept).await.unwrap(), 1);
        assert_eq!(queue.hand_back(&kept).await.unwrap(), 1, "its own, it hands back");
        assert_eq!(holder(kept).await, None, "settled: a fresh entry replaces it");
        let _: () = redis::cmd("DEL").arg(&queue.stream).query_async(&mut connection).await.unwrap();
    }

    /// An entry listed as idle, then touched by its consumer before the dead-letter move runs:
    /// the move finds it unclaimable and leaves it pending with its consumer, in the stream.
    #[tokio::test]
    async fn an_entry_its_consumer_still_holds_is_not_dead_lettered() {
        let Some(redis) = redis("dead-letter-race").await else { return };
        let queue = RedisStreamQueue::new(redis.clone(), "reclaimer", StreamSettings::default());
        queue.ensure_group().await.unwrap();
        let mut connection = redis.connection();
        let id = handed_to(&queue, "owner").await;
        // Idle for well under a minute: not claimable with a minute's minimum, nor taken.
        assert_eq!(queue.dead_letter(&id, 60_000, "delivered too often").await.unwrap(), 0);
        assert!(!queue.take_idle(&id, 60_000).await.unwrap());
        let pending = pending_entries(&queue).await;
        assert_eq!(pending.len(), 1, "still pending");
        assert_eq!(pending[0].1, "owner", "with its consumer");
        let dead: u64 = redis::cmd("XLEN").arg(&queue.dead).query_async(&mut connection).await.unwrap();
        assert_eq!(dead, 0, "no dead letter");

        // Taken with no minimum: this consumer holds it, its deliveries not counted again.
        assert!(queue.take_idle(&id, 0).await.unwrap());
        let held = pending_entries(&queue).await;
        assert_eq!((held[0].1.as_str(), held[0].3), ("reclaimer", 1), "{held:?}");
        // Claimable (no minimum): moved, acknowledged and deleted.
        assert_eq!(queue.dead_letter(&id, 0, "delivered too often").await.unwrap(), 1);
        let (length, dead): (u64, u64) = redis::pipe()
            .cmd("XLEN")
            .arg(&queue.stream)
            .cmd("XLEN")
            .arg(&queue.dead)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!((length, dead), (0, 1));
        let kept: i64 = redis::cmd("PTTL").arg(&queue.dead).query_async(&mut connection).await.unwrap();
        assert!(kept > 0 && kept as u64 <= DEAD_LETTERS_KEPT_MS, "dead letters expire: {kept}");
        let _: () = redis::cmd("DEL").arg(&queue.stream).arg(&queue.dead).query_async(&mut connection).await.unwrap();
    }
}
