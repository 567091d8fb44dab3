//! Faults around the job path: deliveries that are forged, out of order, repeated or late;
//! Redis down at start-up and back; Redis that accepts connections but never answers. Each
//! ends in a clear error or a correct skip, with no step applied twice, no partial record and
//! nothing visible to another principal.

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
    assert!(processed.is_err(), "the consumer reports it, so the queue redelivers");
}
