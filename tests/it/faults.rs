//! Faults around the job path: deliveries that are forged, out of order, repeated or late;
//! Redis down at start-up and back; Redis that accepts connections but never answers; a platform
//! API (the outbound client that publishes to Vercel Queues) that never answers or answers too
//! much. Each ends in a clear error or a correct skip, with no step applied twice, no partial
//! record and nothing visible to another principal.

use crate::common;

use common::redis::unique_prefix;
use std::sync::Arc;

use vercel_mcp::Parts;
use vercel_mcp::jobs::consumer::Processed;
use vercel_mcp::jobs::model::JOB_RETENTION_MS;
use vercel_mcp::jobs::redis_store::RedisJobStore;
use vercel_mcp::jobs::{Consumer, JobMessage, JobResult, JobStore, Jobs, MemoryJobStore};
use vercel_mcp::observe::MemorySink;
use vercel_mcp::security::Principal;
use vercel_mcp::state::{ManualClock, SeededRandom};
use vercel_mcp::store::Redis;

const NOW: u64 = 1_700_000_000_000;

struct Env {
    jobs: Jobs,
    consumer: Consumer,
    config: Parts,
    clock: Arc<ManualClock>,
}

fn env_over(store: Arc<dyn JobStore>) -> Env {
    env_logging_to(store, Arc::new(MemorySink::default()))
}

fn env_logging_to(store: Arc<dyn JobStore>, logs: Arc<MemorySink>) -> Env {
    let clock = Arc::new(ManualClock::new(NOW));
    let mut config = Parts::for_tests(clock.clone());
    config.log_sink = logs;
    config.random = Arc::new(SeededRandom::new(11));
    config.jobs.store = store;
    config.settings.job_step_delay = std::time::Duration::ZERO;
    let jobs = config.job_service().as_ref().clone();
    let consumer = vercel_mcp::consumer(&config);
    Env { jobs, consumer, config, clock }
}

impl Env {
    /// Submits `steps` for `owner`; returns the handle and the message the queue would carry.
    async fn submit(&self, owner: &Principal, steps: u32) -> (String, JobMessage) {
        let handle = self.jobs.submit(owner, i64::from(steps), None).await.unwrap().job_id;
        let job_id = vercel_mcp::jobs::handle::open(&self.config.settings.sealer, owner.id(), &handle).unwrap();
        (handle, JobMessage { job_id, owner_id: owner.id().into(), steps, traceparent: None })
    }
}

fn alice() -> Principal {
    Principal::verified(Some("alice"), None, vec![])
}

#[tokio::test]
async fn a_forged_owner_or_step_count_in_a_message_touches_nothing() {
    let env = env_over(Arc::new(MemoryJobStore::new()));
    let (handle, message) = env.submit(&alice(), 3).await;
    let forged_owner = JobMessage { owner_id: "sub:mallory".into(), ..message.clone() };
    assert!(matches!(env.consumer.process(&forged_owner).await, Ok(Processed::Skipped("not_found"))));
    let inflated = JobMessage { steps: 50, ..message.clone() };
    assert!(matches!(env.consumer.process(&inflated).await, Ok(Processed::Skipped("mismatched_message"))));
    let status = env.jobs.status(&alice(), &handle).await.unwrap();
    assert_eq!((status.state, status.completed_steps), ("pending", 0));
    let mallory = Principal::verified(Some("mallory"), None, vec![]);
    assert_eq!(env.jobs.status(&mallory, &handle).await.unwrap_err(), "unknown job handle");
    env.consumer.process(&message).await.unwrap();
    assert_eq!(env.jobs.result(&alice(), &handle).await.unwrap().result, Some(JobResult { sum: 3, steps_run: 3 }));
}

#[tokio::test]
async fn out_of_order_repeated_and_late_deliveries_apply_each_step_once() {
    let store = Arc::new(MemoryJobStore::new());
    let env = env_over(store.clone());
    let (first, first_message) = env.submit(&alice(), 2).await;
    let (second, second_message) = env.submit(&alice(), 4).await;
    // The later job's message arrives first; both still finish with exactly their steps.
    assert!(matches!(env.consumer.process(&second_message).await, Ok(Processed::Finished("done"))));
    assert!(matches!(env.consumer.process(&first_message).await, Ok(Processed::Finished("done"))));
    // Redelivered after finishing: acknowledged as finished, nothing re-run.
    assert!(matches!(env.consumer.process(&first_message).await, Ok(Processed::Finished("done"))));
    assert_eq!(env.jobs.result(&alice(), &first).await.unwrap().result, Some(JobResult { sum: 1, steps_run: 2 }));
    assert_eq!(env.jobs.result(&alice(), &second).await.unwrap().result, Some(JobResult { sum: 6, steps_run: 4 }));
    // Late, after the record expired: skipped, and no record comes back to life.
    env.clock.advance_ms(JOB_RETENTION_MS + 1);
    assert!(matches!(env.consumer.process(&second_message).await, Ok(Processed::Skipped("not_found"))));
    assert_eq!(env.jobs.status(&alice(), &second).await.unwrap_err(), "unknown job handle");
    assert_eq!(store.get(&second_message.owner_id, &second_message.job_id, NOW).await.unwrap(), None);
}

#[tokio::test]
async fn redis_down_at_start_is_a_clear_error_until_it_comes_back() {
    let Some(mut private) = common::redis::private_redis() else { return };
    private.stop();
    let store = Arc::new(RedisJobStore::new(Redis::connect(&private.url(), &unique_prefix("down-at-start")).unwrap()));
    let env = env_over(store);
    let error = env.jobs.submit(&alice(), 2, None).await.unwrap_err();
    assert!(error.starts_with("job store unavailable"), "{error}");
    assert!(!error.contains("redis://") && !error.contains(&private.port.to_string()), "{error}");
    assert!(private.restart());
    let mut accepted = None;
    for _ in 0..100 {
        match env.jobs.submit(&alice(), 2, None).await {
            Ok(job) => {
                accepted = Some(job);
                break;
            }
            Err(e) => assert!(e.starts_with("job store unavailable"), "{e}"),
        }
    }
    let handle = accepted.expect("submits succeed once Redis is back").job_id;
    assert_eq!(env.jobs.status(&alice(), &handle).await.unwrap().state, "pending");
}

/// A Redis that accepts connections and reads, but never answers: the slowest Redis.
#[tokio::test]
async fn a_redis_that_never_answers_is_a_timeout_error_not_a_hang() {
    let store = Arc::new(RedisJobStore::new(
        Redis::connect(&format!("redis://{}", common::black_hole().await), &unique_prefix("slow")).unwrap(),
    ));
    let logs = Arc::new(MemorySink::default());
    let env = env_logging_to(store, logs.clone());
    // Bounded: if the store's own timeout were lost, this test fails rather than hangs.
    let error =
        common::bounded("a submit against a silent Redis", env.jobs.submit(&alice(), 2, None)).await.unwrap_err();
    assert!(error.starts_with("job store unavailable"), "{error}");
    // The caller gets a correlation id; the server's log line with the same id says what failed.
    let id = error.rsplit_once("(correlation id ").map(|(_, rest)| rest.trim_end_matches(')')).expect("an id");
    let line = logs.lines().into_iter().find(|l| l["event"] == "job.fault").expect("a job.fault line");
    assert_eq!((line["correlationId"].as_str(), line["operation"].as_str()), (Some(id), Some("create")));
    let message = JobMessage {
        job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        owner_id: alice().id().into(),
        steps: 2,
        traceparent: None,
    };
    let processed = common::bounded("a delivery against a silent Redis", env.consumer.process(&message)).await;
    // The consumer reports it, so the queue redelivers.
    let error = processed.expect_err("a store error");
    assert_eq!(error.kind(), vercel_mcp::store::StoreErrorKind::Fault, "{error}");
}

/// A GET of `http://{addr}/` through the outbound client, with `timeout`.
async fn outbound_get(
    addr: std::net::SocketAddr,
    timeout: std::time::Duration,
) -> Result<vercel_mcp::outbound::OutboundResponse, String> {
    let request =
        http::Request::get(format!("http://{addr}/")).body(http_body_util::Full::new(bytes::Bytes::new())).unwrap();
    vercel_mcp::outbound::send(request, timeout).await
}

/// A platform API that accepts the connection and never answers: the call ends at its own
/// timeout, with an error that names neither the address nor anything sent. (Virtual time: the
/// clock is paused and advances when every task waits.)
#[tokio::test(start_paused = true)]
async fn an_outbound_call_that_gets_no_answer_ends_at_its_timeout() {
    let addr = common::black_hole().await;
    let start = tokio::time::Instant::now();
    let hung = std::time::Duration::from_secs(60);
    let outcome = tokio::time::timeout(hung, outbound_get(addr, std::time::Duration::from_secs(5))).await;
    let error = outcome.expect("the call ended on its own").unwrap_err();
    assert_eq!(error, "timed out");
    assert_eq!(start.elapsed(), std::time::Duration::from_secs(5));
}

/// A platform API's answer is read up to 1 MiB: a body of exactly that arrives whole; one byte
/// more, declared or sent in chunks with no length, is an error rather than memory the caller
/// pays for. The error names no address.
#[tokio::test]
async fn an_outbound_answer_is_read_up_to_a_mebibyte() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const LIMIT: usize = 1024 * 1024;
    let answer_with = |length: usize, chunked: bool| async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                head.push(stream.read_u8().await.unwrap());
            }
            let body = vec![b'x'; length];
            let framed = if chunked {
                let mut framed = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
                for chunk in body.chunks(64 * 1024) {
                    framed.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    framed.extend_from_slice(chunk);
                    framed.extend_from_slice(b"\r\n");
                }
                framed.extend_from_slice(b"0\r\n\r\n");
                framed
            } else {
                let mut framed = format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n").into_bytes();
                framed.extend_from_slice(&body);
                framed
            };
            // The client may stop reading an answer it refuses; what it did not read is dropped.
            let _ = stream.write_all(&framed).await;
        });
        let timeout = std::time::Duration::from_secs(10);
        common::bounded("an outbound call", outbound_get(addr, timeout)).await
    };
    for chunked in [false, true] {
        let whole = answer_with(LIMIT, chunked).await.expect("exactly the limit is read");
        assert_eq!((whole.status.as_u16(), whole.body.len()), (200, LIMIT), "chunked {chunked}");
        let error = answer_with(LIMIT + 1, chunked).await.unwrap_err();
        assert_eq!(error, "response unreadable", "chunked {chunked}");
    }
}
