//! The Redis Streams job queue against a real Redis, in one process: delivery and
//! acknowledgement, several workers, the bound, dead letters, a consumer that died mid-job or
//! between storing its last step and acknowledging, and shutdown handing work back.
//! `stream_instances.rs` does the same with real processes and real signals.

use crate::common;

use common::redis::{redis, unique_prefix};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use vercel_mcp::jobs::consumer::{Consumer, Processed};
use vercel_mcp::jobs::queue::{
    JobMessage, RedisStreamQueue, STREAM_CONSUMER_GROUP, StreamEntry, StreamSettings, StreamTarget,
};
use vercel_mcp::jobs::redis_store::RedisJobStore;
use vercel_mcp::jobs::{JobStore, Jobs, Submitted};
use vercel_mcp::observe::{Logger, MemorySink};
use vercel_mcp::security::Principal;
use vercel_mcp::state::{Sealer, SeededRandom, SystemClock};
use vercel_mcp::store::Redis;

/// One test's world: a key prefix of its own in the shared Redis.
struct World {
    redis: Redis,
    store: Arc<RedisJobStore>,
    alice: Principal,
}

impl World {
    fn new(url: &str, name: &str) -> Self {
        let redis = Redis::connect(url, &unique_prefix(name)).unwrap();
        Self {
            store: Arc::new(RedisJobStore::new(redis.clone())),
            redis,
            alice: Principal::verified(Some("alice"), None, vec![]),
        }
    }

    fn queue(&self, consumer: &str, settings: StreamSettings) -> Arc<RedisStreamQueue> {
        Arc::new(RedisStreamQueue::new(self.redis.clone(), consumer, settings))
    }

    fn jobs(&self, queue: &Arc<RedisStreamQueue>) -> Jobs {
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], Arc::new(SystemClock)).unwrap();
        Jobs::new(self.store.clone(), queue.clone(), sealer, Arc::new(SystemClock), Arc::new(SeededRandom::new(9)))
    }

    /// A consumer over this world's store that logs to `sink`, `step` per step.
    fn consumer(&self, queue: &Arc<RedisStreamQueue>, step: Duration, sink: &Arc<MemorySink>) -> Arc<Consumer> {
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], Arc::new(SystemClock)).unwrap();
        Arc::new(Consumer {
            store: self.store.clone(),
            queue: queue.clone(),
            clock: Arc::new(SystemClock),
            step_delay: step,
            budget: Duration::from_secs(60),
            logger: Some(Logger::new(sink.clone(), sealer, Arc::new(SeededRandom::new(3)))),
            telemetry: vercel_mcp::telemetry::Telemetry::off(),
            platform: Default::default(),
            confirm_faults: Default::default(),
        })
    }

    async fn command<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut command = redis::cmd(args[0]);
        for arg in &args[1..] {
            command.arg(*arg);
        }
        command.query_async(&mut self.redis.connection()).await.unwrap()
    }
}

/// Fast reclaims for tests; `reclaim_idle` is the time a dead consumer's entry waits.
fn settings(reclaim_idle_ms: u64) -> StreamSettings {
    StreamSettings { reclaim_idle: Duration::from_millis(reclaim_idle_ms), ..StreamSettings::default() }
}

/// Polls `status` until the job is no longer active, for at most `limit`.
async fn finished(jobs: &Jobs, principal: &Principal, handle: &str, limit: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let status = serde_json::to_value(jobs.status(principal, handle).await.unwrap()).unwrap();
        if !matches!(status["state"].as_str(), Some("pending" | "running")) {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "not finished within {limit:?}: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn handle_of(submitted: &Submitted) -> String {
    submitted.job_id.clone()
}

/// The completed-step counts a consumer logged, in order.
fn logged_steps(sink: &MemorySink) -> Vec<u64> {
    sink.lines()
        .iter()
        .filter(|l| matches!(l["event"].as_str(), Some("job.progress" | "job.finish")))
        .map(|l| l["completedSteps"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn jobs_run_once_through_the_stream_and_their_entries_are_gone() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-once");
    let queue = world.queue("a", settings(30_000));
    let jobs = world.jobs(&queue);
    let sink = Arc::new(MemorySink::default());
    let worker = tokio::spawn(queue.clone().work(world.consumer(&queue, Duration::ZERO, &sink)));
    let handles: Vec<String> =
        futures_util::future::join_all((1..=3).map(|steps| jobs.submit(&world.alice, steps, None)))
            .await
            .iter()
            .map(|s| handle_of(s.as_ref().unwrap()))
            .collect();
    for (handle, steps) in handles.iter().zip(1..=3) {
        let status = finished(&jobs, &world.alice, handle, Duration::from_secs(10)).await;
        assert_eq!((status["state"].as_str(), status["completedSteps"].as_u64()), (Some("done"), Some(steps)));
    }
    queue.shut_down();
    worker.await.unwrap();
    assert_eq!(world.command::<u64>(&["XLEN", queue.stream_key()]).await, 0, "acknowledged entries are deleted");
    let pending: (u64, redis::Value, redis::Value, redis::Value) =
        world.command(&["XPENDING", queue.stream_key(), STREAM_CONSUMER_GROUP]).await;
    assert_eq!(pending.0, 0, "nothing left unacknowledged");
    assert_eq!(logged_steps(&sink).len(), 6, "1 + 2 + 3 steps, each once");
}

#[tokio::test]
async fn two_workers_and_a_duplicate_message_still_run_every_step_once() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-two");
    let (a, b) = (world.queue("a", settings(30_000)), world.queue("b", settings(30_000)));
    let jobs = world.jobs(&a);
    let submitted = jobs.submit(&world.alice, 4, None).await.unwrap();
    // The same message again, as a retried publish would leave it.
    let body: Vec<(String, Vec<String>)> = world.command(&["XRANGE", a.stream_key(), "-", "+"]).await;
    world.command::<String>(&["XADD", a.stream_key(), "*", "body", &body[0].1[1]]).await;
    let more: Vec<String> = futures_util::future::join_all((0..6).map(|_| jobs.submit(&world.alice, 2, None)))
        .await
        .iter()
        .map(|s| handle_of(s.as_ref().unwrap()))
        .collect();
    let (sink_a, sink_b) = (Arc::new(MemorySink::default()), Arc::new(MemorySink::default()));
    let step = Duration::from_millis(5);
    let workers = [
        tokio::spawn(a.clone().work(world.consumer(&a, step, &sink_a))),
        tokio::spawn(b.clone().work(world.consumer(&b, step, &sink_b))),
    ];
    let first = finished(&jobs, &world.alice, &handle_of(&submitted), Duration::from_secs(10)).await;
    assert_eq!(first["completedSteps"], 4);
    for handle in &more {
        assert_eq!(finished(&jobs, &world.alice, handle, Duration::from_secs(10)).await["completedSteps"], 2);
    }
    a.shut_down();
    b.shut_down();
    for worker in workers {
        worker.await.unwrap();
    }
    let steps = logged_steps(&sink_a).len() + logged_steps(&sink_b).len();
    assert_eq!(steps, 4 + 6 * 2, "every step stored once, whichever worker and however many copies");
    assert_eq!(world.command::<u64>(&["XLEN", a.stream_key()]).await, 0);
}

#[tokio::test]
async fn a_submit_queues_its_job_and_a_full_stream_refuses_without_storing_anything() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-full");
    let queue = world.queue("a", StreamSettings { max_len: 1, ..settings(30_000) });
    let jobs = world.jobs(&queue);
    let handle = handle_of(&jobs.submit(&world.alice, 2, None).await.unwrap());
    // The entry carries the job the handle names.
    let entries: Vec<(String, Vec<Vec<u8>>)> = world.command(&["XRANGE", queue.stream_key(), "-", "+"]).await;
    let message = vercel_mcp::jobs::JobMessage::parse(&entries[0].1[1]).expect("a job message");
    assert_eq!((message.owner_id.as_str(), message.steps), ("sub:alice", 2));
    assert_eq!(jobs.status(&world.alice, &handle).await.unwrap().state, "pending");

    let refused = jobs.submit(&world.alice, 1, None).await.unwrap_err();
    assert!(refused.contains("the job queue is full (1 waiting)") && refused.contains("try again later"), "{refused}");
    assert!(!refused.contains("expires on its own"), "nothing was stored to expire: {refused}");
    assert_eq!(world.command::<u64>(&["XLEN", queue.stream_key()]).await, 1);
    let records: Vec<String> = world.command(&["KEYS", &format!("{}:job:*", world.redis.prefix())]).await;
    assert_eq!(records.len(), 1, "no record for the refused job: {records:?}");
    let owner = b64("sub:alice");
    for set in ["active", "held"] {
        let held: u64 = world.command(&["ZCARD", &format!("{}:{set}:{owner}", world.redis.prefix())]).await;
        assert_eq!(held, 1, "the refused job is in no {set} set");
    }
    let rates: Vec<String> = world.command(&["KEYS", &format!("{}:rate:{owner}:*", world.redis.prefix())]).await;
    let counted: u64 = world.command(&["GET", &rates[0]]).await;
    assert_eq!(counted, 1, "a refused submission does not count against the caller's rate");
}

/// Redis down: the one-script submit fails with the store's short description, and no handle.
#[tokio::test]
async fn a_submit_while_redis_is_down_is_a_clear_error() {
    let world = World::new("redis://127.0.0.1:1", "streams-down");
    let queue = world.queue("a", settings(30_000));
    let refused = world.jobs(&queue).submit(&world.alice, 1, None).await.unwrap_err();
    assert!(refused.starts_with("job store unavailable: connection failed"), "{refused}");
    assert!(!refused.contains("127.0.0.1") && !refused.contains(queue.stream_key()), "no address or key: {refused}");
    // A delivery's settling step on that connection: an error, never a settled entry.
    let entry = StreamEntry {
        target: StreamTarget { redis: &world.redis, stream: queue.stream_key(), max_len: 10 },
        group: STREAM_CONSUMER_GROUP,
        id: "1-0",
    };
    let settling = world.store.advance_settling("sub:alice", "AAAAAAAAAAAAAAAAAAAAAA", 0, now(), entry);
    let error = settling.expect("same connection: one script").await.unwrap_err();
    assert!(error.message().starts_with("job store unavailable: connection failed"), "{}", error.message());
    let message = JobMessage {
        job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        owner_id: "sub:alice".into(),
        steps: 1,
        traceparent: None,
    };
    let sink = Arc::new(MemorySink::default());
    assert!(world.consumer(&queue, Duration::ZERO, &sink).run_settling(&message, Some(entry)).await.is_err());
}

/// A stream reached through another connection (it could be another server) is published to on
/// its own, and a refusal there rolls the record back.
#[tokio::test]
async fn a_stream_on_another_connection_is_published_to_separately_and_rolled_back_when_full() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-apart");
    let elsewhere = Redis::connect(&url, world.redis.prefix()).unwrap();
    assert!(!elsewhere.is_same_connection(&world.redis) && world.redis.is_same_connection(&world.redis.clone()));
    let queue = Arc::new(RedisStreamQueue::new(elsewhere, "a", StreamSettings { max_len: 1, ..settings(30_000) }));
    let jobs = world.jobs(&queue);
    jobs.submit(&world.alice, 1, None).await.unwrap();
    assert_eq!(world.command::<u64>(&["XLEN", queue.stream_key()]).await, 1);
    let refused = jobs.submit(&world.alice, 1, None).await.unwrap_err();
    assert!(refused.contains("the job queue is full") && refused.contains("try again later"), "{refused}");
    assert_eq!(world.command::<u64>(&["XLEN", queue.stream_key()]).await, 1);
    let active: u64 = world.command(&["ZCARD", &format!("{}:active:{}", world.redis.prefix(), b64("sub:alice"))]).await;
    assert_eq!(active, 1, "the refused job's record was deleted");
}

/// Reads one new entry as consumer `reader`: its id and the job message it carries.
async fn read_entry(world: &World, queue: &RedisStreamQueue, reader: &str) -> (String, JobMessage) {
    /// An entry's id and its fields, flat (`field, value, …`).
    type Entry = (String, Vec<Vec<u8>>);
    let reply: Vec<(String, Vec<Entry>)> = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(STREAM_CONSUMER_GROUP)
        .arg(reader)
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(queue.stream_key())
        .arg(">")
        .query_async(&mut world.redis.connection())
        .await
        .unwrap();
    let (id, fields) = reply.into_iter().next().unwrap().1.into_iter().next().unwrap();
    (id, JobMessage::parse(&fields[1]).unwrap())
}

/// Entries read but not acknowledged, and entries in the stream.
async fn pending_and_length(world: &World, queue: &RedisStreamQueue) -> (u64, u64) {
    let pending: (u64, redis::Value, redis::Value, redis::Value) =
        world.command(&["XPENDING", queue.stream_key(), STREAM_CONSUMER_GROUP]).await;
    (pending.0, world.command::<u64>(&["XLEN", queue.stream_key()]).await)
}

/// The script that stores a job's last step (or finds the job over or gone) acknowledges and
/// deletes the delivery's entry in the same step; a step after which the job goes on, or one
/// another delivery already applied, leaves it pending; a store on another connection never
/// touches the stream; and a consumer run settled that way tells its transport so.
#[tokio::test]
async fn the_step_that_ends_a_job_settles_its_entry_and_no_other_step_does() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-settle");
    let queue = world.queue("a", settings(30_000));
    let jobs = world.jobs(&queue);
    world.command::<String>(&["XGROUP", "CREATE", queue.stream_key(), STREAM_CONSUMER_GROUP, "0", "MKSTREAM"]).await;
    let target = StreamTarget { redis: &world.redis, stream: queue.stream_key(), max_len: 100 };
    let elsewhere = RedisJobStore::new(Redis::connect(&url, world.redis.prefix()).unwrap());

    jobs.submit(&world.alice, 2, None).await.unwrap();
    let (id, message) = read_entry(&world, &queue, "t").await;
    let entry = StreamEntry { target, group: STREAM_CONSUMER_GROUP, id: &id };
    let (owner, job) = (message.owner_id.as_str(), message.job_id.as_str());
    assert!(elsewhere.advance_settling(owner, job, 0, now(), entry).is_none(), "another connection: no script");
    let first = world.store.advance_settling(owner, job, 0, now(), entry).unwrap().await.unwrap().unwrap();
    assert!(first.applied && first.record.state.is_active());
    assert_eq!(pending_and_length(&world, &queue).await, (1, 1), "the job goes on: its entry stays pending");
    let again = world.store.advance_settling(owner, job, 0, now(), entry).unwrap().await.unwrap().unwrap();
    assert!(!again.applied && again.record.completed_steps == 1);
    assert_eq!(pending_and_length(&world, &queue).await, (1, 1), "a step applied already settles nothing");
    let last = world.store.advance_settling(owner, job, 1, now(), entry).unwrap().await.unwrap().unwrap();
    assert!(last.applied && last.record.state.as_str() == "done");
    assert_eq!(pending_and_length(&world, &queue).await, (0, 0), "the last step acknowledged and deleted it");

    // A job cancelled before its delivery ran: the advance finds it over and settles the entry.
    let cancelled = jobs.submit(&world.alice, 3, None).await.unwrap();
    jobs.cancel(&world.alice, &handle_of(&cancelled)).await.unwrap();
    let (id, message) = read_entry(&world, &queue, "t").await;
    let entry = StreamEntry { target, group: STREAM_CONSUMER_GROUP, id: &id };
    let found = world.store.advance_settling(&message.owner_id, &message.job_id, 0, now(), entry);
    let found = found.unwrap().await.unwrap().unwrap();
    assert!(!found.applied && found.record.state.as_str() == "cancelled");
    assert_eq!(pending_and_length(&world, &queue).await, (0, 0));

    // A job that is gone (a forged owner reads as gone): settled too, nothing created.
    jobs.submit(&world.alice, 1, None).await.unwrap();
    let (id, message) = read_entry(&world, &queue, "t").await;
    let entry = StreamEntry { target, group: STREAM_CONSUMER_GROUP, id: &id };
    let gone = world.store.advance_settling("sub:mallory", &message.job_id, 0, now(), entry).unwrap().await.unwrap();
    assert!(gone.is_none());
    assert_eq!(pending_and_length(&world, &queue).await, (0, 0));
    assert!(world.store.get("sub:mallory", &message.job_id, now()).await.unwrap().is_none());

    // Through the consumer: a one-step job's run reports its entry settled; over a store on
    // another connection the same run leaves the entry to its transport.
    let sink = Arc::new(MemorySink::default());
    let consumer = world.consumer(&queue, Duration::ZERO, &sink);
    jobs.submit(&world.alice, 1, None).await.unwrap();
    let (id, message) = read_entry(&world, &queue, "t").await;
    let entry = StreamEntry { target, group: STREAM_CONSUMER_GROUP, id: &id };
    let run = consumer.run_settling(&message, Some(entry)).await.unwrap();
    assert_eq!(run, (Processed::Finished("done"), true));
    assert_eq!(pending_and_length(&world, &queue).await, (0, 0));
    let apart = Consumer { store: Arc::new(elsewhere), ..(*consumer).clone() };
    jobs.submit(&world.alice, 1, None).await.unwrap();
    let (id, message) = read_entry(&world, &queue, "t").await;
    let entry = StreamEntry { target, group: STREAM_CONSUMER_GROUP, id: &id };
    let run = apart.run_settling(&message, Some(entry)).await.unwrap();
    assert_eq!(run, (Processed::Finished("done"), false));
    assert_eq!(pending_and_length(&world, &queue).await, (1, 1), "left for the transport to acknowledge");
}

/// The commands clients send Redis that name `needle`, as a `MONITOR` connection sees them
/// (commands a script runs are marked `lua` there, and left out: they are not round trips).
struct Monitor {
    seen: Arc<std::sync::Mutex<Vec<String>>>,
    socket: std::net::TcpStream,
    needle: String,
}

impl Monitor {
    fn watch(url: &str, needle: &str) -> Self {
        use std::io::{BufRead, BufReader, Write};
        let address = url.trim_start_matches("redis://").trim_end_matches('/');
        let mut socket = std::net::TcpStream::connect(address).unwrap();
        socket.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(socket.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "+OK");
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (into, needle_) = (seen.clone(), needle.to_owned());
        std::thread::spawn(move || {
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.contains(&needle_) && !line.contains(" lua] ") {
                    into.lock().unwrap().push(line.trim_end().to_owned());
                }
                line.clear();
            }
        });
        Self { seen, socket, needle: needle.to_owned() }
    }

    /// Everything seen up to now: a marker command is sent and waited for, so nothing sent
    /// before it is still on its way.
    async fn caught_up(&self, world: &World) -> Vec<String> {
        let marker = format!("{}:caught-up", self.needle);
        let _: String = world.command(&["ECHO", &marker]).await;
        loop {
            let seen = self.seen.lock().unwrap().clone();
            if let Some(at) = seen.iter().position(|line| line.contains(&marker)) {
                return seen[..at].to_vec();
            }
            tokio::task::yield_now().await;
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}

/// A command's name and its first two arguments, from a `MONITOR` line
/// (`time [db address] "NAME" "arg" "arg" …`).
fn command_head(line: &str) -> Vec<&str> {
    let quoted = line.split_once("] ").map_or("", |(_, rest)| rest);
    quoted.split("\" \"").take(3).map(|part| part.trim_matches('"')).collect()
}

/// With the job store on the queue's connection, a one-step job's delivery is a read, a `GET`
/// and the script that stores the step and acknowledges the entry: the worker sends no
/// acknowledging script of its own.
#[tokio::test]
async fn a_delivery_settled_by_its_last_step_sends_no_acknowledgement_of_its_own() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-no-ack-trip");
    let queue = world.queue("a", settings(30_000));
    let monitor = Monitor::watch(&url, queue.stream_key());
    let jobs = world.jobs(&queue);
    let sink = Arc::new(MemorySink::default());
    let worker = tokio::spawn(queue.clone().work(world.consumer(&queue, Duration::ZERO, &sink)));
    for _ in 0..3 {
        let handle = handle_of(&jobs.submit(&world.alice, 1, None).await.unwrap());
        let status = finished(&jobs, &world.alice, &handle, Duration::from_secs(10)).await;
        assert_eq!(status["state"], "done");
    }
    queue.shut_down();
    worker.await.unwrap();
    assert_eq!(pending_and_length(&world, &queue).await, (0, 0), "every entry settled");
    let sent = monitor.caught_up(&world).await;
    // Leaving the group at shutdown is a one-key script too, the only one whose last argument is
    // this consumer's name (an acknowledgement's is an entry id).
    let leaving = |line: &&String| line.trim_end().ends_with("\"a\"");
    let scripts: Vec<Vec<&str>> = sent
        .iter()
        .filter(|line| !leaving(line))
        .map(|line| command_head(line))
        .filter(|head| head[0].starts_with("EVAL"))
        .collect();
    let keys = |n: &str| scripts.iter().filter(|head| head.get(2) == Some(&n)).count();
    assert!(keys("6") >= 3, "each submit's create script names the stream: {sent:#?}");
    assert!(keys("5") >= 3, "each job's last step names the stream, to settle its entry: {sent:#?}");
    assert_eq!(keys("1"), 0, "no acknowledging script of its own: {sent:#?}");
    assert_eq!(scripts.len(), keys("6") + keys("5"), "{sent:#?}");
    let left: Vec<Vec<&str>> = sent.iter().filter(leaving).map(|line| command_head(line)).collect();
    assert_eq!(left.len(), 1, "one script to leave the group: {sent:#?}");
    assert!(left[0][0].starts_with("EVAL") && left[0][2] == "1", "{left:?}");
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

#[tokio::test]
async fn what_can_never_run_or_keeps_failing_goes_to_the_dead_letters() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-dead");
    let queue = world.queue("a", StreamSettings { max_deliveries: 3, ..settings(100) });
    let jobs = world.jobs(&queue);
    // Not a job message: dead at once, never retried.
    world.command::<String>(&["XADD", queue.stream_key(), "*", "body", "{\"jobId\":\"nonsense\"}"]).await;
    // A job whose record has become unreadable: every delivery fails, until the limit.
    let submitted = jobs.submit(&world.alice, 2, None).await.unwrap();
    let keys: Vec<String> = world.command(&["KEYS", &format!("{}:job:*", world.redis.prefix())]).await;
    world.command::<()>(&["SET", &keys[0], "not json", "KEEPTTL"]).await;
    let sink = Arc::new(MemorySink::default());
    let worker = tokio::spawn(queue.clone().work(world.consumer(&queue, Duration::ZERO, &sink)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let dead = loop {
        let dead: Vec<(String, Vec<String>)> = world.command(&["XRANGE", queue.dead_letter_key(), "-", "+"]).await;
        if dead.len() == 2 || tokio::time::Instant::now() > deadline {
            break dead;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    queue.shut_down();
    worker.await.unwrap();
    let reasons: Vec<&str> = dead.iter().map(|(_, fields)| fields[3].as_str()).collect();
    assert_eq!(reasons, ["not a job message", "delivered too often"], "{dead:?}");
    let runs = sink.lines().iter().filter(|l| l["event"] == "job.run" && l["result"] == "store_error").count();
    assert_eq!(runs, 3, "exactly the delivery limit");
    assert_eq!(world.command::<u64>(&["XLEN", queue.stream_key()]).await, 0, "nothing left to retry");
    let _ = submitted;
}

/// A queue that gives a message up after two deliveries, and a job whose message has had both:
/// read, then claimed again, by a consumer that ran nothing.
async fn delivered_to_a_ghost_twice(world: &World) -> (Arc<RedisStreamQueue>, Jobs, Submitted) {
    let queue = world.queue("a", StreamSettings { max_deliveries: 2, ..settings(100) });
    let _: () = world.command(&["XGROUP", "CREATE", queue.stream_key(), "jobs", "0", "MKSTREAM"]).await;
    let jobs = world.jobs(&queue);
    let submitted = jobs.submit(&world.alice, 2, None).await.unwrap();
    let entries: Vec<(String, Vec<String>)> = world.command(&["XRANGE", queue.stream_key(), "-", "+"]).await;
    let id = entries[0].0.clone();
    let _: redis::Value = world
        .command(&["XREADGROUP", "GROUP", "jobs", "ghost", "COUNT", "1", "STREAMS", queue.stream_key(), ">"])
        .await;
    let _: redis::Value = world.command(&["XCLAIM", queue.stream_key(), "jobs", "ghost", "0", &id]).await;
    (queue, jobs, submitted)
}

/// The job's progress once it is no longer pending, or after 10 s (the worker runs on its own).
async fn no_longer_pending<'a>(
    jobs: &Jobs,
    world: &World,
    submitted: &'a Submitted,
) -> vercel_mcp::jobs::JobProgress<'a> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = jobs.status(&world.alice, &submitted.job_id).await.unwrap();
        if status.state != "pending" || tokio::time::Instant::now() > deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A job whose message is given up (delivered too often: here, taken twice by a consumer that
/// never ran it) is failed, not left active: nothing would run it again, and it held one of its
/// owner's active slots until its deadline.
#[tokio::test]
async fn a_job_whose_message_is_given_up_is_failed() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-given-up");
    let (queue, jobs, submitted) = delivered_to_a_ghost_twice(&world).await;
    let sink = Arc::new(MemorySink::default());
    let worker = tokio::spawn(queue.clone().work(world.consumer(&queue, Duration::ZERO, &sink)));
    let status = no_longer_pending(&jobs, &world, &submitted).await;
    queue.shut_down();
    worker.await.unwrap();
    assert_eq!((status.state, status.completed_steps), ("failed", 0), "given up, not left pending");
    let dead: Vec<(String, Vec<String>)> = world.command(&["XRANGE", queue.dead_letter_key(), "-", "+"]).await;
    assert_eq!(dead.len(), 1);
    let fault = sink.lines().into_iter().find(|l| l["event"] == "job.fault").expect("a job.fault line");
    assert_eq!(fault["operation"], "dead_letter");
    assert!(fault["detail"].as_str().is_some_and(|detail| detail.ends_with("the job is failed")), "{fault}");
}

/// A job is failed before its given-up message moves to the dead letters, so a move that does not
/// happen (the process dies, or here the move fails: the dead letters' key holds a string) leaves
/// a failed job and an entry that a later reclaim moves, never a job holding its owner's slot
/// with no entry left to end it.
#[tokio::test]
async fn a_given_up_job_is_failed_before_its_message_moves() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-given-up-first");
    let (queue, jobs, submitted) = delivered_to_a_ghost_twice(&world).await;
    world.command::<()>(&["SET", queue.dead_letter_key(), "in the way"]).await;
    let sink = Arc::new(MemorySink::default());
    let worker = tokio::spawn(queue.clone().work(world.consumer(&queue, Duration::ZERO, &sink)));
    let status = no_longer_pending(&jobs, &world, &submitted).await;
    assert_eq!(status.state, "failed", "failed though its entry could not move");
    assert_eq!(world.command::<u64>(&["XLEN", queue.stream_key()]).await, 1, "the entry is still there");
    // Once the move can happen, a later reclaim makes it.
    world.command::<()>(&["DEL", queue.dead_letter_key()]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let moved = loop {
        let left = world.command::<u64>(&["XLEN", queue.stream_key()]).await;
        if left == 0 || tokio::time::Instant::now() > deadline {
            break left == 0;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    queue.shut_down();
    worker.await.unwrap();
    assert!(moved, "the entry moved to the dead letters");
    let dead: Vec<(String, Vec<String>)> = world.command(&["XRANGE", queue.dead_letter_key(), "-", "+"]).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(jobs.status(&world.alice, &submitted.job_id).await.unwrap().state, "failed", "and stays failed");
}

/// A consumer that read a job and died: after storing three of its steps, or after storing all
/// of them but before acknowledging. Another instance takes it over once it has been idle for
/// the reclaim time and resumes from what is stored: no step runs twice.
#[tokio::test]
async fn a_consumer_that_died_is_taken_over_and_no_step_runs_twice() {
    let Some((url, _guard)) = redis() else { return };
    for (stored, name) in [(3u32, "streams-died-mid-job"), (8, "streams-died-before-ack")] {
        let world = World::new(&url, name);
        let queue = world.queue("survivor", settings(200));
        let jobs = world.jobs(&queue);
        let submitted = jobs.submit(&world.alice, 8, None).await.unwrap();
        // The consumer that dies: it reads the entry, stores `stored` steps, and is gone.
        world.command::<()>(&["XGROUP", "CREATE", queue.stream_key(), STREAM_CONSUMER_GROUP, "0", "MKSTREAM"]).await;
        let read: redis::Value = world
            .command(&[
                "XREADGROUP",
                "GROUP",
                STREAM_CONSUMER_GROUP,
                "dead",
                "COUNT",
                "1",
                "STREAMS",
                queue.stream_key(),
                ">",
            ])
            .await;
        assert_ne!(read, redis::Value::Nil, "the dead consumer held the entry");
        let body: Vec<(String, Vec<String>)> = world.command(&["XRANGE", queue.stream_key(), "-", "+"]).await;
        let message: Value = serde_json::from_str(&body[0].1[1]).unwrap();
        let (owner, id) = (message["ownerId"].as_str().unwrap(), message["jobId"].as_str().unwrap());
        for step in 0..stored {
            assert!(world.store.advance(owner, id, step, now()).await.unwrap().unwrap().applied);
        }
        let sink = Arc::new(MemorySink::default());
        let worker = tokio::spawn(queue.clone().work(world.consumer(&queue, Duration::ZERO, &sink)));
        let status = finished(&jobs, &world.alice, &handle_of(&submitted), Duration::from_secs(10)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while world.command::<u64>(&["XLEN", queue.stream_key()]).await > 0 {
            assert!(tokio::time::Instant::now() < deadline, "the taken-over entry was never acknowledged");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        queue.shut_down();
        worker.await.unwrap();
        assert_eq!((status["state"].as_str(), status["completedSteps"].as_u64()), (Some("done"), Some(8)));
        let expected: Vec<u64> = (u64::from(stored) + 1..=8).collect();
        assert_eq!(logged_steps(&sink), expected, "{name}: the survivor stored only the steps the dead one had not");
    }
}

#[tokio::test]
async fn shutting_down_hands_work_back_at_once() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-shutdown");
    // A reclaim time far longer than the test: only a hand-back can move the job in time.
    let (a, b) = (world.queue("a", settings(600_000)), world.queue("b", settings(600_000)));
    let jobs = world.jobs(&a);
    let submitted = jobs.submit(&world.alice, 20, None).await.unwrap();
    let (sink_a, sink_b) = (Arc::new(MemorySink::default()), Arc::new(MemorySink::default()));
    let worker_a = tokio::spawn(a.clone().work(world.consumer(&a, Duration::from_millis(50), &sink_a)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while logged_steps(&sink_a).len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "worker a never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.shut_down();
    tokio::time::timeout(Duration::from_secs(5), worker_a).await.expect("a stops promptly").unwrap();
    let worker_b = tokio::spawn(b.clone().work(world.consumer(&b, Duration::ZERO, &sink_b)));
    let status = finished(&jobs, &world.alice, &handle_of(&submitted), Duration::from_secs(10)).await;
    b.shut_down();
    worker_b.await.unwrap();
    assert_eq!(status["completedSteps"], 20);
    let (by_a, by_b) = (logged_steps(&sink_a), logged_steps(&sink_b));
    assert_eq!(by_a.len() + by_b.len(), 20, "a: {by_a:?}, b: {by_b:?}");
    assert_eq!(by_b.first().copied(), by_a.last().map(|s| s + 1), "b resumed where a stopped");
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A job longer than one delivery's time budget defers again and again: each deferral puts its
/// entry back on the stream at once, so running long is never counted as a failed delivery and
/// never ends in the dead letters, however low the delivery limit.
#[tokio::test]
async fn a_job_longer_than_a_delivery_defers_without_using_up_its_deliveries() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-defer");
    let queue = world.queue("a", StreamSettings { max_deliveries: 2, ..settings(200) });
    let jobs = world.jobs(&queue);
    let sink = Arc::new(MemorySink::default());
    let short = Consumer {
        budget: Duration::from_millis(40),
        ..(*world.consumer(&queue, Duration::from_millis(15), &sink)).clone()
    };
    let worker = tokio::spawn(queue.clone().work(Arc::new(short)));
    let submitted = jobs.submit(&world.alice, 12, None).await.unwrap();
    let status = finished(&jobs, &world.alice, &handle_of(&submitted), Duration::from_secs(10)).await;
    queue.shut_down();
    worker.await.unwrap();
    assert_eq!((status["state"].as_str(), status["completedSteps"].as_u64()), (Some("done"), Some(12)), "{status}");
    let deferrals = sink.lines().iter().filter(|l| l["event"] == "job.run" && l["result"] == "deferred").count();
    assert!(deferrals >= 2, "the job took more deliveries than the limit allows failures: {deferrals}");
    assert_eq!(world.command::<u64>(&["XLEN", queue.dead_letter_key()]).await, 0, "nothing dead-lettered");
    assert_eq!(pending_and_length(&world, &queue).await, (0, 0), "and its entry settled");
    assert_eq!(logged_steps(&sink), (1..=12).collect::<Vec<u64>>(), "each step once");
}

/// The consumers in the group, by name, with the entries each holds.
async fn consumers(world: &World, queue: &RedisStreamQueue) -> Vec<(String, u64)> {
    let listed: Vec<std::collections::HashMap<String, redis::Value>> =
        world.command(&["XINFO", "CONSUMERS", queue.stream_key(), STREAM_CONSUMER_GROUP]).await;
    let mut named: Vec<(String, u64)> = listed
        .iter()
        .map(|c| {
            (
                redis::from_redis_value(c["name"].clone()).unwrap(),
                redis::from_redis_value(c["pending"].clone()).unwrap(),
            )
        })
        .collect();
    named.sort();
    named
}

/// An instance that stops holding nothing leaves the group, so the group does not list every
/// process that ever ran; one that still holds an entry stays, so the entry can be reclaimed.
#[tokio::test]
async fn an_instance_that_stops_holding_nothing_leaves_the_group() {
    let Some((url, _guard)) = redis() else { return };
    let world = World::new(&url, "streams-leave");
    let (a, holder) = (world.queue("a", settings(600_000)), world.queue("holder", settings(600_000)));
    let jobs = world.jobs(&a);
    let sink = Arc::new(MemorySink::default());
    let worker = tokio::spawn(a.clone().work(world.consumer(&a, Duration::ZERO, &sink)));
    let handle = handle_of(&jobs.submit(&world.alice, 1, None).await.unwrap());
    assert_eq!(finished(&jobs, &world.alice, &handle, Duration::from_secs(10)).await["state"], "done");
    assert_eq!(consumers(&world, &a).await, [("a".to_owned(), 0)], "a member while it runs");
    a.shut_down();
    worker.await.unwrap();
    assert!(consumers(&world, &a).await.is_empty(), "gone once it stopped");

    // One holding an entry it never settled (its hand-back did not happen) stays in the group.
    jobs.submit(&world.alice, 1, None).await.unwrap();
    read_entry(&world, &holder, "holder").await;
    let worker = tokio::spawn(holder.clone().work(world.consumer(&holder, Duration::ZERO, &sink)));
    tokio::task::yield_now().await;
    holder.shut_down();
    worker.await.unwrap();
    assert_eq!(consumers(&world, &holder).await, [("holder".to_owned(), 1)], "kept, with what it holds");
}
