//! Several instances of the local run sharing one Redis, with jobs on the Redis stream: an
//! instance killed with SIGKILL mid-job, one stopped with SIGTERM, and Redis itself restarted
//! mid-run. Every job finishes with exactly its steps, each step stored once (counted from the
//! instances' own logs), and reads the same from every instance.

use crate::common;

use common::process::{Launch, Process};
use common::redis::PrivateRedis;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SECRET: &str = "streams=0123456789abcdef0123456789abcdef";

/// One instance of the local run, its log going to a file the test reads.
struct Instance {
    process: Process,
    server: common::TestServer,
    log: PathBuf,
}

impl Instance {
    fn start(redis: &str, prefix: &str, vars: &[(&str, &str)]) -> Self {
        let launch = Launch::local();
        let log = std::env::temp_dir().join(format!("stream-instance-{}-{}.log", std::process::id(), launch.port()));
        let (process, server) = launch
            .env("REDIS_URL", redis)
            .env("MCP_REDIS_PREFIX", prefix)
            .env("MCP_STATE_SECRET", SECRET)
            .env("MCP_JOB_CAP_ANONYMOUS", "50")
            .env("MCP_JOB_STEP_MS", "300")
            .env("MCP_QUEUE_RECLAIM_IDLE_MS", "1000")
            .envs(vars)
            .log_to(&log)
            .start();
        Self { process, server, log }
    }

    fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    async fn call(&self, tool: &str, arguments: Value) -> Value {
        common::payload(&self.server.call_tool(tool, arguments).await)
    }

    /// How many deliveries this instance logged ending with `result` (`job.run` lines).
    fn runs_ending(&self, result: &str) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|l| l["event"] == "job.run" && l["result"] == result)
            .count()
    }

    /// The `(job, completedSteps)` of every step this instance logged storing.
    fn steps(&self) -> Vec<(String, u64)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|l| matches!(l["event"].as_str(), Some("job.progress" | "job.finish")))
            .map(|l| (l["job"].as_str().unwrap().to_owned(), l["completedSteps"].as_u64().unwrap()))
            .collect()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

fn prefix(test: &str) -> String {
    common::redis::unique_prefix(test)
}

/// Submits `count` jobs of `steps` steps on `instance`; their handles.
async fn submit(instance: &Instance, count: usize, steps: u64) -> Vec<String> {
    let mut handles = Vec::new();
    for _ in 0..count {
        let submitted = instance.call("submit_job", json!({ "steps": steps })).await;
        handles.push(submitted["jobId"].as_str().unwrap().to_owned());
    }
    handles
}

/// Waits until `instance` has logged at least `steps` stored steps.
async fn until_working(instance: &Instance, steps: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while instance.steps().len() < steps {
        assert!(Instant::now() < deadline, "the instance never started working");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until a consumer holds a delivery of the job stream under `prefix` (it has read an entry
/// it has not acknowledged): the job is in some instance's hands.
async fn until_held(redis_url: &str, prefix: &str) {
    let client = redis::Client::open(redis_url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let stream = format!("{prefix}:queue:jobs");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let summary: redis::Value = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(vercel_mcp::jobs::queue::STREAM_CONSUMER_GROUP)
            .query_async(&mut connection)
            .await
            .unwrap_or(redis::Value::Nil);
        if let redis::Value::Array(fields) = summary {
            if matches!(fields.first(), Some(redis::Value::Int(held)) if *held > 0) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "no instance took the job");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls every handle on `reader` until each is done, within `limit`; how long that took.
async fn all_done(reader: &Instance, handles: &[String], steps: u64, limit: Duration) -> Duration {
    let started = Instant::now();
    for handle in handles {
        loop {
            let status = reader.call("get_job_status", json!({ "jobId": handle })).await;
            if status["state"] == "done" {
                assert_eq!(status["completedSteps"], steps, "{status}");
                break;
            }
            assert!(!matches!(status["state"].as_str(), Some("failed" | "cancelled")), "{status}");
            assert!(started.elapsed() < limit, "not done within {limit:?}: {status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    started.elapsed()
}

/// Across every instance's log, no step of any job was stored twice, and each job's last step
/// was stored. (An instance stopped between storing a step and writing its log line leaves that
/// line out; the stored record, read by the caller, says all steps ran.)
fn no_step_twice(instances: &[&Instance], jobs: usize, steps: u64) {
    let mut by_job: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for instance in instances {
        for (job, step) in instance.steps() {
            by_job.entry(job).or_default().push(step);
        }
    }
    assert_eq!(by_job.len(), jobs, "{by_job:?}");
    for (job, mut logged) in by_job {
        logged.sort_unstable();
        let before = logged.len();
        logged.dedup();
        assert_eq!(logged.len(), before, "job {job}: a step was stored twice: {logged:?}");
        assert_eq!(logged.last(), Some(&steps), "job {job}: {logged:?}");
        assert!(logged.len() as u64 >= steps - 1, "job {job}: {logged:?}");
    }
}

fn private_redis(persistent: bool) -> Option<PrivateRedis> {
    let redis = if persistent { PrivateRedis::start_persistent() } else { PrivateRedis::start() };
    if redis.is_none() {
        common::redis::skip_or_fail("no redis-server on PATH (these tests start their own)");
    }
    redis
}

/// SIGKILL mid-job: the dead instance's deliveries are reclaimed once idle for the reclaim time
/// (1 s here) and resumed from the stored record by the others. Bound: the reclaim time, half of
/// it again for the next reclaim pass, and the remaining steps at 300 ms, plus slack.
#[tokio::test]
async fn an_instance_killed_mid_job_loses_nothing_and_runs_no_step_twice() {
    let Some(redis) = private_redis(false) else { return };
    let prefix = prefix("killed");
    let mut a = Instance::start(&redis.url(), &prefix, &[]);
    let handles = submit(&a, 2, 8).await;
    until_working(&a, 2).await;
    let b = Instance::start(&redis.url(), &prefix, &[]);
    let c = Instance::start(&redis.url(), &prefix, &[]);
    a.signal("KILL");
    let _ = a.process.0.wait();
    assert!(a.steps().len() < 2 * 8, "the kill fell mid-job: {} steps were stored", a.steps().len());
    let took = all_done(&b, &handles, 8, Duration::from_secs(1 + 1 + 3 + 5)).await;
    assert!(b.steps().len() + c.steps().len() > 0, "the others resumed the killed instance's jobs");
    // Readable from every instance, the killed one restarted included.
    let a_again = Instance::start(&redis.url(), &prefix, &[]);
    for handle in &handles {
        assert_eq!(a_again.call("get_job_status", json!({ "jobId": handle })).await["state"], "done");
        assert_eq!(c.call("get_job_status", json!({ "jobId": handle })).await["state"], "done");
    }
    no_step_twice(&[&a, &b, &c, &a_again], 2, 8);
    eprintln!("killed mid-job: both jobs done {took:?} after the kill");
}

/// SIGTERM: the instance stops reading, hands back what it holds and exits; another resumes it
/// at once. The reclaim time here is a minute, so only the hand-back can move it in time.
#[tokio::test]
async fn an_instance_stopped_with_sigterm_hands_its_job_back() {
    let Some(redis) = private_redis(false) else { return };
    let prefix = prefix("sigterm");
    let slow_reclaim = [("MCP_QUEUE_RECLAIM_IDLE_MS", "60000")];
    let mut a = Instance::start(&redis.url(), &prefix, &slow_reclaim);
    let handles = submit(&a, 1, 10).await;
    until_working(&a, 2).await;
    let b = Instance::start(&redis.url(), &prefix, &slow_reclaim);
    a.signal("TERM");
    let stopping = Instant::now();
    let status = loop {
        if let Some(status) = a.process.exited() {
            break status;
        }
        assert!(stopping.elapsed() < Duration::from_secs(5), "SIGTERM did not stop the instance");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "a graceful exit: {status:?}");
    assert!(a.steps().len() < 10, "the job was handed back, not finished during the stop");
    all_done(&b, &handles, 10, Duration::from_secs(10)).await;
    assert!(!b.steps().is_empty(), "the other instance ran the rest");
    no_step_twice(&[&a, &b], 1, 10);
}

/// Redis restarted mid-run (persistent, so the stream and the records survive): the instances
/// reconnect, deliveries that failed meanwhile are retried, and every job finishes exactly once.
#[tokio::test]
async fn redis_restarted_mid_run_loses_nothing() {
    let Some(mut redis) = private_redis(true) else { return };
    let prefix = prefix("redis-restart");
    let a = Instance::start(&redis.url(), &prefix, &[]);
    let b = Instance::start(&redis.url(), &prefix, &[]);
    let handles = submit(&a, 4, 6).await;
    until_working(&a, 1).await;
    redis.stop();
    // The outage falls in the middle of the run: steps were left, and the store answers nobody.
    assert!(a.steps().len() + b.steps().len() < 4 * 6, "the jobs finished before the outage");
    let during = b.server.call_tool("get_job_status", json!({ "jobId": handles[0] })).await;
    assert!(common::error_text(&during).starts_with("job store unavailable"), "{during}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(redis.restart(), "redis-server restarts");
    all_done(&b, &handles, 6, Duration::from_secs(30)).await;
    let failed = a.runs_ending("store_error") + b.runs_ending("store_error");
    assert!(failed > 0, "deliveries failed during the outage (and were retried: every job is done)");
    no_step_twice(&[&a, &b], 4, 6);
}

/// A job submitted through one process and run by another: one trace, the delivery's span (in
/// the second process) linked to the submitting request's span (in the first). The first is
/// stopped with SIGTERM mid-step, so the second must run it; each exports its spans over OTLP to
/// the test's receiver. The reclaim time is a minute, so only the hand-back can move the job.
#[tokio::test]
async fn a_job_handed_to_another_process_continues_the_trace_that_submitted_it() {
    let Some(redis) = private_redis(false) else { return };
    let (endpoint, received) = crate::telemetry::receiver().await;
    let prefix = prefix("traced");
    let traced = |service: &'static str, step_ms: &'static str| {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-key=secret%20value".to_owned()),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            ("MCP_JOB_STEP_MS", step_ms.to_owned()),
            ("MCP_QUEUE_RECLAIM_IDLE_MS", "60000".to_owned()),
        ]
    };
    let a_vars = traced("instance-a", "5000");
    let a_refs: Vec<(&str, &str)> = a_vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut a = Instance::start(&redis.url(), &prefix, &a_refs);
    let handles = submit(&a, 1, 2).await;
    // A is in its first five-second step once it has logged the job's start: stop it; it hands
    // the job back and exports its spans.
    until_held(&redis.url(), &prefix).await;
    a.signal("TERM");
    // Waited for without blocking the runtime: the receiver runs on it, and A exports on its way out.
    let stopping = Instant::now();
    while a.process.exited().is_none() {
        assert!(stopping.elapsed() < Duration::from_secs(5), "SIGTERM did not stop the instance");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b_vars = traced("instance-b", "10");
    let b_refs: Vec<(&str, &str)> = b_vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let b = Instance::start(&redis.url(), &prefix, &b_refs);
    all_done(&b, &handles, 2, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let (submit_span, delivery) = loop {
        {
            let received = received.lock().unwrap();
            let find = |name: &str, service: &str| {
                received
                    .spans
                    .iter()
                    .zip(&received.span_services)
                    .find(|(span, s)| span.name == name && s.as_str() == service)
                    .map(|(span, _)| span.clone())
            };
            if let (Some(submit), Some(delivery)) =
                (find("tools/call submit_job", "instance-a"), find("process jobs", "instance-b"))
            {
                break (submit, delivery);
            }
        }
        assert!(Instant::now() < deadline, "both processes' spans arrive");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(delivery.trace_id, submit_span.trace_id, "one trace across the two processes");
    assert_eq!(delivery.links.len(), 1);
    assert_eq!(
        (crate::telemetry::hex(&delivery.links[0].trace_id), crate::telemetry::hex(&delivery.links[0].span_id)),
        (crate::telemetry::hex(&submit_span.trace_id), crate::telemetry::hex(&submit_span.span_id))
    );
}
