//! The async-jobs surface over loopback HTTP with the embedded store and a hand-driven queue:
//! submit, poll, fetch, cancel, caps, retention, delivery semantics, the consumer contract and
//! the cron sweep.

use crate::common;

use common::{TestServer, error_text, payload};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use vercel_mcp::jobs::model::{JOB_RETENTION_MS, JobRecord};
use vercel_mcp::jobs::queue::{FailingPublisher, JobMessage};
use vercel_mcp::jobs::store::{Advanced, CreateRefused, Quota, SweepReport};
use vercel_mcp::jobs::{JobResult, JobStore, Jobs, LocalQueue, MemoryJobStore, UnconfiguredJobStore};
use vercel_mcp::local::Routes;
use vercel_mcp::security::Principal;
use vercel_mcp::state::{ManualClock, SeededRandom};
use vercel_mcp::store::{StoreError, StoreFuture};
use vercel_mcp::{Parts, mcp_app};

struct Env {
    server: TestServer,
    store: Arc<MemoryJobStore>,
    queue: LocalQueue,
    clock: Arc<ManualClock>,
}

fn config(store: Arc<dyn JobStore>, clock: Arc<ManualClock>) -> Parts {
    let mut config = Parts::for_tests(clock);
    config.random = Arc::new(SeededRandom::new(42));
    config.jobs.store = store;
    config.settings.job_step_delay = std::time::Duration::ZERO;
    config.settings.cron_secret = Some("cron-secret-for-tests-0123456789".into());
    config
}

async fn env() -> Env {
    let store = Arc::new(MemoryJobStore::new());
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = config(store.clone(), clock.clone());
    let queue = config.jobs.local_queue.clone().unwrap();
    let routes = Routes::with_mcp(mcp_app(&config)).with_jobs(&config);
    Env { server: TestServer::start_routes(routes).await, store, queue, clock }
}

impl Env {
    async fn submit(&self, steps: Value) -> Value {
        self.server.call_tool("submit_job", json!({ "steps": steps })).await
    }
    async fn call(&self, tool: &str, handle: &str) -> Value {
        self.server
            .call_tool(tool, json!({ "jobId": handle, "principal": "sub:mallory", "ownerId": "sub:mallory" }))
            .await
    }
}

#[tokio::test]
async fn the_four_tools_are_listed_without_identity_arguments() {
    let env = env().await;
    let tools = env.server.modern(json!(1), "tools/list", json!({})).send().await.json()["result"]["tools"].clone();
    let names: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    let job_tools: Vec<&str> = names.iter().copied().filter(|n| n.contains("job")).collect();
    assert_eq!(job_tools, ["submit_job", "get_job_status", "get_job_result", "cancel_job"]);
    let by_name = |name: &str| tools.as_array().unwrap().iter().find(|t| t["name"] == name).unwrap().clone();
    let submit = &by_name("submit_job");
    assert_eq!(submit["inputSchema"]["properties"]["steps"]["type"], "integer");
    assert_eq!(submit["annotations"], json!({"readOnlyHint": false, "idempotentHint": false}));
    assert_eq!(by_name("get_job_result")["annotations"], json!({"readOnlyHint": true, "idempotentHint": true}));
    // Cancelling changes the job and cannot be undone, so it claims no `destructiveHint: false`
    // (absent, the spec reads it as destructive); asked twice, it cancels once.
    assert_eq!(by_name("cancel_job")["annotations"], json!({"readOnlyHint": false, "idempotentHint": true}));
    for tool in tools.as_array().unwrap() {
        let empty = serde_json::Map::new();
        let properties = tool["inputSchema"]["properties"].as_object().unwrap_or(&empty);
        assert!(!properties.contains_key("principal") && !properties.contains_key("ownerId"), "{}", tool["name"]);
    }
}

#[tokio::test]
async fn a_job_runs_to_completion_through_the_queue() {
    let env = env().await;
    let submitted = payload(&env.submit(json!(4)).await);
    assert_eq!(submitted["state"], "pending");
    assert_eq!(submitted["totalSteps"], 4);
    assert!(submitted.get("ownerId").is_none());
    let handle = submitted["jobId"].as_str().unwrap().to_owned();
    assert!(!handle.contains("anonymous"), "the handle does not reveal its owner");
    assert_eq!(payload(&env.call("get_job_status", &handle).await)["completedSteps"], 0, "submit does no work");
    assert_eq!(env.queue.pending_len(), 1);
    env.queue.drain().await;
    let status = env.call("get_job_status", &handle).await;
    assert_eq!(payload(&status), json!({"jobId": handle, "state": "done", "completedSteps": 4, "totalSteps": 4}));
    // The text a model reads, byte for byte: members in name order, as they were always written.
    let text = |result: &Value| result["content"][0]["text"].as_str().unwrap().to_owned();
    assert_eq!(text(&status), format!(r#"{{"completedSteps":4,"jobId":"{handle}","state":"done","totalSteps":4}}"#));
    let result = env.call("get_job_result", &handle).await;
    assert_eq!(text(&result), format!(r#"{{"jobId":"{handle}","result":{{"stepsRun":4,"sum":6}},"state":"done"}}"#));
    let first = payload(&result);
    assert_eq!(first["result"], json!({"sum": 6, "stepsRun": 4}));
    assert_eq!(payload(&env.call("get_job_result", &handle).await), first, "result fetch is idempotent");
}

#[tokio::test]
async fn invalid_submits_are_tool_errors_and_leave_nothing_behind() {
    let env = env().await;
    for steps in [json!(0), json!(101), json!(1.5), json!("three"), json!(null)] {
        let result = env.submit(steps.clone()).await;
        assert_eq!(result["isError"], true, "{steps}");
    }
    assert!(env.store.is_empty());
    assert_eq!(env.queue.pending_len(), 0);
    let unknown = env.server.modern(json!(1), "tools/call", json!({"name": "nope", "arguments": {}})).send().await;
    assert_eq!(unknown.code(), -32602);
}

#[tokio::test]
async fn anonymous_callers_get_two_slots_and_finishing_frees_one() {
    let env = env().await;
    let a = payload(&env.submit(json!(3)).await)["jobId"].as_str().unwrap().to_owned();
    payload(&env.submit(json!(3)).await);
    let refused = error_text(&env.submit(json!(3)).await);
    assert!(refused.contains("at most 2 active jobs"), "{refused}");
    assert!(!refused.contains("anonymous"), "no owner information in errors");
    assert_eq!(env.store.len(), 2, "the refused submit left no record");
    payload(&env.call("cancel_job", &a).await);
    payload(&env.submit(json!(3)).await);
    assert_eq!(env.store.len(), 3);
    assert!(error_text(&env.submit(json!(3)).await).contains("at most 2 active jobs"));
    // Completion frees slots as cancellation does.
    env.queue.drain().await;
    payload(&env.submit(json!(1)).await);
    payload(&env.submit(json!(1)).await);
}

#[tokio::test]
async fn unknown_tampered_and_raw_handles_get_the_same_error() {
    let env = env().await;
    let handle = payload(&env.submit(json!(2)).await)["jobId"].as_str().unwrap().to_owned();
    let raw_id = env.store.len();
    assert_eq!(raw_id, 1);
    for bad in ["bogus".to_owned(), format!("{handle}x"), handle.replacen("v2.", "v1.", 1), "A".repeat(22)] {
        for tool in ["get_job_status", "get_job_result", "cancel_job"] {
            assert_eq!(error_text(&env.call(tool, &bad).await), "unknown job handle", "{tool} {bad}");
        }
    }
    assert_eq!(payload(&env.call("get_job_status", &handle).await)["state"], "pending", "the real job is untouched");
}

#[tokio::test]
async fn cancellation_stops_the_work_and_is_idempotent() {
    let env = env().await;
    let handle = payload(&env.submit(json!(5)).await)["jobId"].as_str().unwrap().to_owned();
    let cancelled = payload(&env.call("cancel_job", &handle).await);
    assert_eq!(cancelled["state"], "cancelled");
    env.queue.drain().await;
    let status = payload(&env.call("get_job_status", &handle).await);
    assert_eq!(
        (status["state"].clone(), status["completedSteps"].clone()),
        (json!("cancelled"), json!(0)),
        "no step ran"
    );
    assert_eq!(payload(&env.call("get_job_result", &handle).await)["result"], Value::Null);
    assert_eq!(payload(&env.call("cancel_job", &handle).await)["state"], "cancelled");
    let done = payload(&env.submit(json!(2)).await)["jobId"].as_str().unwrap().to_owned();
    env.queue.drain().await;
    assert_eq!(payload(&env.call("cancel_job", &done).await)["state"], "done", "a done job stays done");
    assert_eq!(payload(&env.call("get_job_result", &done).await)["result"], json!({"sum": 1, "stepsRun": 2}));
}

#[tokio::test]
async fn finished_jobs_are_retained_for_five_minutes_and_reads_do_not_extend_it() {
    let env = env().await;
    let done = payload(&env.submit(json!(1)).await)["jobId"].as_str().unwrap().to_owned();
    env.queue.drain().await;
    let active = payload(&env.submit(json!(1)).await)["jobId"].as_str().unwrap().to_owned();
    env.clock.advance_ms(JOB_RETENTION_MS - 1);
    payload(&env.call("get_job_result", &done).await);
    payload(&env.call("cancel_job", &done).await);
    env.clock.advance_ms(1);
    assert_eq!(error_text(&env.call("get_job_result", &done).await), "unknown job handle");
    assert_eq!(payload(&env.call("get_job_status", &active).await)["state"], "pending", "active jobs are not evicted");
    // A cancelled job is kept for the same window, counted from its cancellation.
    env.clock.advance_ms(1000);
    payload(&env.call("cancel_job", &active).await);
    env.clock.advance_ms(JOB_RETENTION_MS - 1);
    assert_eq!(payload(&env.call("get_job_status", &active).await)["state"], "cancelled");
    env.clock.advance_ms(1);
    assert_eq!(error_text(&env.call("get_job_status", &active).await), "unknown job handle");
}

/// A copy of a message delivered after its job finished changes nothing (the local queue delivers
/// one message at a time, so the copy arrives once the job is done). Copies delivered at the same
/// moment, with each applied step counted where it lands: `duplicates_apply_each_step_once`.
#[tokio::test]
async fn a_message_delivered_again_after_its_job_finished_changes_nothing() {
    let env = env().await;
    let handle = payload(&env.submit(json!(6)).await)["jobId"].as_str().unwrap().to_owned();
    env.queue.duplicate_last();
    assert_eq!(env.queue.pending_len(), 2);
    env.queue.drain().await;
    let status = payload(&env.call("get_job_status", &handle).await);
    assert_eq!((status["state"].clone(), status["completedSteps"].clone()), (json!("done"), json!(6)));
    assert_eq!(payload(&env.call("get_job_result", &handle).await)["result"], json!({"sum": 15, "stepsRun": 6}));
}

#[tokio::test]
async fn the_consumer_validates_every_delivery() {
    let env = env().await;
    let path = "/api/queues/process-job";
    let message = json!({"jobId": "AAAAAAAAAAAAAAAAAAAAAA", "ownerId": "anonymous", "steps": 3}).to_string();
    let delivery = |body: &str| {
        env.server
            .post_to(path, body.to_owned())
            .header("ce-type", "com.vercel.queue.v2beta")
            .header("ce-vqsqueuename", "jobs")
            .header("ce-vqsconsumergroup", "local")
            .header("ce-vqsmessageid", "m1")
            .header("ce-vqsregion", "iad1")
            .header("ce-vqsreceipthandle", "r1")
    };
    let forged = delivery(&message).send().await;
    assert_eq!(forged.status, 409, "a lease the queue never handed out is not acted on: {}", forged.text());
    assert_eq!(
        delivery(&message).replace("ce-vqsconsumergroup", "someone-elses-group").send().await.status,
        400,
        "another consumer group is refused before the queue is asked"
    );
    for bad in ["not json", "{}", r#"{"jobId":"AAAAAAAAAAAAAAAAAAAAAA","ownerId":"anonymous","steps":0}"#] {
        assert_eq!(delivery(bad).send().await.status, 400, "{bad}");
    }
    for (header, value) in [
        ("ce-type", "com.example.other"),
        ("ce-vqsqueuename", "other"),
        ("ce-vqsregion", "NOT-A-REGION"),
        ("ce-vqsmessageid", "a/b"),
    ] {
        assert_eq!(delivery(&message).replace(header, value).send().await.status, 400, "{header}");
    }
    assert_eq!(delivery(&message).without("ce-vqsreceipthandle").send().await.status, 400);
    assert_eq!(env.server.request("GET", path).send().await.status, 405);

    // A real job, and a hand-made push naming it exactly: refused, and the job is untouched
    // until the queue delivers it itself.
    let handle = payload(&env.submit(json!(2)).await)["jobId"].as_str().unwrap().to_owned();
    let (job_id, owner) = {
        let pending = env.queue.pending_messages();
        let message: Value = serde_json::from_slice(&pending[0]).unwrap();
        (message["jobId"].as_str().unwrap().to_owned(), message["ownerId"].as_str().unwrap().to_owned())
    };
    let push = json!({"jobId": job_id, "ownerId": owner, "steps": 2}).to_string();
    assert_eq!(delivery(&push).send().await.status, 409);
    let untouched = payload(&env.call("get_job_status", &handle).await);
    assert_eq!((untouched["state"].clone(), untouched["completedSteps"].clone()), (json!("pending"), json!(0)));
    env.queue.drain().await;
    assert_eq!(
        payload(&env.call("get_job_status", &handle).await)["state"],
        "done",
        "the queue's own delivery runs it"
    );
}

/// Each endpoint is its own protected resource: a handle made on `/api/mcp` is unknown on an
/// example's endpoint and the other way round, to the same caller, for status, result and
/// cancel alike (each endpoint's handles are bound to it and to their owner).
#[tokio::test]
async fn a_job_handle_is_redeemed_only_on_the_endpoint_that_made_it() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = config(Arc::new(MemoryJobStore::new()), clock);
    let main = config.job_service();
    let example = config.services_at("/api/examples/async_jobs").jobs.clone();
    let other_example = config.services_at("/api/examples/other").jobs.clone();
    let owner = Principal::verified(Some("ada"), None, vec![]);
    for (made, elsewhere) in [(&main, [&example, &other_example]), (&example, [&main, &other_example])] {
        let handle = made.submit(&owner, 2, None).await.unwrap().job_id;
        for service in elsewhere {
            assert_eq!(service.status(&owner, &handle).await.err().as_deref(), Some("unknown job handle"));
            assert_eq!(service.result(&owner, &handle).await.err().as_deref(), Some("unknown job handle"));
            assert_eq!(service.cancel(&owner, &handle).await.err().as_deref(), Some("unknown job handle"));
        }
        let status = made.status(&owner, &handle).await.expect("found where it was made");
        assert_eq!(status.state, "pending", "a cancel elsewhere changed nothing");
    }
}

/// A delivery whose lease the queue will not confirm (here: no Vercel OIDC token to ask with; a
/// made-up push carrying a token the queue refuses ends the same way) is a 500, so that a real
/// one comes back, and a `job.fault` line, at most one a minute: the route is public, and a stream
/// of made-up pushes must not fill the log.
#[tokio::test]
async fn a_lease_the_queue_will_not_confirm_is_reported_once_a_minute() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let mut parts = config(Arc::new(MemoryJobStore::new()), clock.clone());
    let logs = Arc::new(vercel_mcp::observe::MemorySink::default());
    parts.log_sink = logs.clone();
    let mut consumer = vercel_mcp::consumer(&parts);
    consumer.queue = Arc::new(vercel_mcp::jobs::VercelQueue::new(Some("http://127.0.0.1:9".into()), None, None, None));
    let push = || {
        http::Request::post("/api/queues/process-job")
            .header("ce-type", "com.vercel.queue.v2beta")
            .header("ce-vqsqueuename", "jobs")
            .header("ce-vqsconsumergroup", vercel_mcp::jobs::queue::VERCEL_CONSUMER_GROUP)
            .header("ce-vqsmessageid", "m1")
            .header("ce-vqsregion", "iad1")
            .header("ce-vqsreceipthandle", "r1")
            .body(bytes::Bytes::from(
                json!({"jobId": "AAAAAAAAAAAAAAAAAAAAAA", "ownerId": "anonymous", "steps": 3}).to_string(),
            ))
            .unwrap()
    };
    let faults = || {
        logs.lines().into_iter().filter(|line| line["event"] == "job.fault" && line["operation"] == "confirm").count()
    };
    for (advance_ms, expected) in [(0, 1), (1_000, 1), (58_000, 1), (1_000, 2), (30_000, 2)] {
        clock.advance_ms(advance_ms);
        let response = consumer.handle(push()).await;
        assert_eq!(response.status(), 500, "not acknowledged: a real delivery comes back");
        assert_eq!(faults(), expected, "after {advance_ms} ms more");
    }
}

/// The local run reads each route's body as its function does on Vercel: the consumer 64 KiB,
/// the sweep 16 KiB, the metadata documents 1 KiB, and a path nothing serves no more (413 one
/// byte past, before the handler); the MCP endpoint reads its own limit. At the cap, the body is
/// read and the route answers for what it is.
#[tokio::test]
async fn each_route_reads_at_most_its_functions_body_cap() {
    let env = env().await;
    let metadata = vercel_mcp::transport::auth::METADATA_MAX_BODY_BYTES;
    let caps = [
        ("/api/queues/process-job", vercel_mcp::jobs::consumer::MAX_BODY_BYTES, 400),
        ("/api/cron/sweep-jobs", vercel_mcp::jobs::sweep::MAX_BODY_BYTES, 401),
        ("/.well-known/oauth-protected-resource", metadata, 405),
        ("/.well-known/oauth-protected-resource/api/mcp", metadata, 405),
        ("/api/nothing-here", metadata, 404),
    ];
    for (path, cap, answer) in caps {
        let over = env.server.post_to(path, "x".repeat(cap + 1)).send().await;
        assert_eq!(over.status, 413, "{path}: {}", over.text());
        let at = env.server.post_to(path, "x".repeat(cap)).send().await;
        assert_eq!(at.status, answer, "{path}: read, then answered for what it is: {}", at.text());
    }
    let mcp = env.server.post_to("/api/mcp", "x".repeat(64 * 1024 + 1)).send().await;
    assert_eq!(mcp.status, 400, "the MCP endpoint reads more (it is not JSON): {}", mcp.text());
}

#[tokio::test]
async fn the_sweep_requires_the_cron_secret() {
    let env = env().await;
    let path = "/api/cron/sweep-jobs";
    assert_eq!(env.server.request("GET", path).send().await.status, 401);
    assert_eq!(env.server.request("GET", path).header("Authorization", "Bearer wrong").send().await.status, 401);
    payload(&env.submit(json!(2)).await);
    env.clock.advance_ms(vercel_mcp::jobs::model::JOB_DEADLINE_MS);
    let swept =
        env.server.request("GET", path).header("Authorization", "Bearer cron-secret-for-tests-0123456789").send().await;
    assert_eq!(swept.status, 200);
    assert_eq!(swept.json(), json!({"evicted": 0, "failedStuck": 1}));
}

/// A deployment without `CRON_SECRET` refuses every sweep, and says so in its log (the platform's
/// cron does not report a 401), a line a minute at most, since anyone may call the path: the
/// caller gets the same 401 as for a wrong secret, and learns nothing of why. With a secret, a
/// wrong one leaves no such line.
#[tokio::test]
async fn a_sweep_refused_for_want_of_a_secret_is_reported() {
    let path = "/api/cron/sweep-jobs";
    for secret in [None, Some("cron-secret-for-tests-0123456789")] {
        let clock = Arc::new(ManualClock::new(0));
        let mut config = config(Arc::new(MemoryJobStore::new()), clock.clone());
        config.settings.cron_secret = secret.map(str::to_owned);
        let sink = Arc::new(vercel_mcp::observe::MemorySink::default());
        config.log_sink = sink.clone();
        let server = TestServer::start_routes(Routes::with_mcp(mcp_app(&config)).with_jobs(&config)).await;
        // The path is public: many refusals, one line a minute at most.
        for _ in 0..3 {
            let refused = server.request("GET", path).header("Authorization", "Bearer guessed").send().await;
            assert_eq!((refused.status, refused.json()), (401, json!({"error": "unauthorized"})), "{secret:?}");
            clock.advance_ms(20_000);
        }
        let refused = server.request("GET", path).send().await;
        assert_eq!(refused.status, 401);
        let faults: Vec<Value> = sink.lines().into_iter().filter(|l| l["event"] == "job.fault").collect();
        match secret {
            None => {
                assert_eq!(faults.len(), 2, "the first, and the first a minute on: {:?}", sink.raw());
                assert_eq!(faults[0]["operation"], "sweep");
                assert!(faults[0]["detail"].as_str().unwrap().contains("CRON_SECRET is not set"), "{}", faults[0]);
            }
            Some(_) => assert!(faults.is_empty(), "a wrong secret is the caller's problem: {:?}", sink.raw()),
        }
        assert!(!sink.raw().iter().any(|line| line.contains("guessed")), "what the caller sent is not logged");
    }
}

/// The service with two verified principals (authentication is the auth issue's; the service
/// takes the principal explicitly).
fn service(store: Arc<dyn JobStore>, clock: Arc<ManualClock>) -> (Jobs, LocalQueue) {
    let config = config(store, clock);
    let queue = config.jobs.local_queue.clone().unwrap();
    (config.job_service().as_ref().clone(), queue)
}

#[tokio::test]
async fn a_foreign_handle_is_indistinguishable_from_a_missing_one() {
    let store = Arc::new(MemoryJobStore::new());
    let (jobs, _queue) = service(store.clone(), Arc::new(ManualClock::new(0)));
    let alice = Principal::verified(Some("alice"), None, vec![]);
    let bob = Principal::verified(Some("bob"), None, vec![]);
    let handle = jobs.submit(&alice, 3, None).await.unwrap().job_id;
    let foreign = jobs.status(&bob, &handle).await.unwrap_err();
    let missing = jobs.status(&bob, "bogus").await.unwrap_err();
    assert_eq!(foreign, missing);
    assert!(!foreign.contains("alice"));
    assert_eq!(jobs.cancel(&bob, &handle).await.unwrap_err(), missing);
    assert_eq!(jobs.result(&bob, &handle).await.unwrap_err(), missing);
    assert_eq!(jobs.status(&alice, &handle).await.unwrap().state, "pending", "alice's job is untouched");
    // Verified principals get eight slots; one principal at its cap does not block another.
    for _ in 0..7 {
        jobs.submit(&alice, 1, None).await.unwrap();
    }
    assert!(jobs.submit(&alice, 1, None).await.unwrap_err().contains("at most 8"));
    jobs.submit(&bob, 1, None).await.unwrap();
    assert_eq!(store.len(), 9);
}

#[tokio::test]
async fn a_failed_publish_or_a_missing_store_leaves_no_record() {
    let store = Arc::new(MemoryJobStore::new());
    let (mut jobs, _) = service(store.clone(), Arc::new(ManualClock::new(0)));
    jobs.set_publisher(Arc::new(FailingPublisher("queue down".into())));
    let error = jobs.submit(&Principal::anonymous(), 3, None).await.unwrap_err();
    assert!(error.contains("could not enqueue the job: queue down"), "{error}");
    assert!(error.contains("(correlation id "), "an outage is a logged fault: {error}");
    assert!(store.is_empty());
    // The local run's queue, full (nothing consumes it here): the second submission is refused
    // and its record rolled back; the first stays queued.
    jobs.set_publisher(Arc::new(LocalQueue::new().with_max_pending(1)));
    jobs.submit(&Principal::anonymous(), 3, None).await.unwrap();
    let error = jobs.submit(&Principal::anonymous(), 3, None).await.unwrap_err();
    assert_eq!(error, "could not enqueue the job: the local queue is full (limit 1); try again later", "no fault");
    assert_eq!(store.len(), 1);
    let (unconfigured, _) = service(
        Arc::new(UnconfiguredJobStore("REDIS_URL is not set: async jobs need a shared store (Redis) when deployed")),
        Arc::new(ManualClock::new(0)),
    );
    let error = unconfigured.submit(&Principal::anonymous(), 3, None).await.unwrap_err();
    assert!(error.contains("REDIS_URL"), "{error}");
}

/// An owner id as long as a token allows rides the queue message: the job of a caller with a
/// long subject, or the longest client id, runs. Before, a message refused owner ids over 512
/// bytes at delivery, so such a job stayed pending, holding a slot, until its deadline.
#[tokio::test]
async fn a_job_of_a_caller_with_a_long_id_runs() {
    use vercel_mcp::security::principal::MAX_ID_BYTES;
    let config = config(Arc::new(MemoryJobStore::new()), Arc::new(ManualClock::new(0)));
    let queue = config.jobs.local_queue.clone().unwrap();
    let _routes = Routes::with_mcp(mcp_app(&config)).with_jobs(&config);
    let jobs = config.job_service();
    let long_subject = Principal::verified(Some(&"s".repeat(600)), None, vec![]);
    let longest = Principal::verified(None, Some(&"c".repeat(MAX_ID_BYTES - "client:".len())), vec![]);
    assert_eq!(longest.id().len(), MAX_ID_BYTES);
    for principal in [long_subject, longest] {
        let handle = jobs.submit(&principal, 2, None).await.unwrap().job_id;
        queue.drain().await;
        assert_eq!(jobs.status(&principal, &handle).await.unwrap().state, "done");
    }
}

/// A create that reports an error but landed (the reply lost, not the command) is the submit's:
/// the job is enqueued to run, and holds no slot as an orphan. Before, the submit failed and
/// left the record pending, so two such errors shut anonymous callers (two active jobs) out
/// until the records' deadline. A create that did not land is still an error, and stores nothing.
#[tokio::test]
async fn a_create_that_landed_though_it_reported_an_error_is_the_submits() {
    struct Lost {
        store: MemoryJobStore,
        lands: bool,
    }
    impl Hooks for Lost {
        fn inner(&self) -> &dyn JobStore {
            &self.store
        }
        fn create<'a>(&'a self, r: &'a JobRecord, q: &'a Quota, n: u64) -> StoreFuture<'a, Result<(), CreateRefused>> {
            Box::pin(async move {
                if self.lands {
                    self.store.create(r, q, n).await?.expect("within the quota");
                }
                Err(StoreError::fault("job store unavailable: connection reset"))
            })
        }
    }
    for lands in [true, false] {
        let store = Arc::new(Hooked(Lost { store: MemoryJobStore::new(), lands }));
        let (jobs, queue) = service(store.clone(), Arc::new(ManualClock::new(0)));
        let anonymous = Principal::anonymous();
        for submits in 1..=2 {
            let submitted = jobs.submit(&anonymous, 1, None).await;
            if lands {
                let handle = submitted.expect("the record is there: the job is submitted").job_id;
                assert_eq!(jobs.status(&anonymous, &handle).await.unwrap().state, "pending");
                assert_eq!(queue.pending_len(), submits, "and enqueued, to run");
            } else {
                let error = submitted.unwrap_err();
                assert!(error.starts_with("job store unavailable"), "{error}");
                assert_eq!(queue.pending_len(), 0);
            }
        }
        assert_eq!(store.store.len(), if lands { 2 } else { 0 });
    }
}

/// A submit whose caller goes away while its message is being published (its future dropped
/// mid-flight) leaves no record behind: nobody holds its handle, and a pending record with no
/// message would hold one of the caller's slots until its deadline. Nor does a create whose
/// outcome cannot be learnt (it errs, and so does the read that would tell whether it landed).
#[tokio::test]
async fn a_submit_that_ends_without_a_handle_leaves_no_record() {
    struct Stuck(Arc<tokio::sync::Notify>);
    impl vercel_mcp::jobs::queue::Publisher for Stuck {
        fn publish<'a>(&'a self, _: &'a JobMessage, _: Option<&'a str>) -> vercel_mcp::jobs::queue::PublishFuture<'a> {
            self.0.notify_one();
            Box::pin(std::future::pending())
        }
    }
    async fn settled(store: &MemoryJobStore) -> usize {
        // The rollback runs on the runtime once the test yields to it.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        store.len()
    }
    let store = Arc::new(MemoryJobStore::new());
    let (mut jobs, _) = service(store.clone(), Arc::new(ManualClock::new(0)));
    let publishing = Arc::new(tokio::sync::Notify::new());
    jobs.set_publisher(Arc::new(Stuck(publishing.clone())));
    let anonymous = Principal::anonymous();
    tokio::select! {
        _ = jobs.submit(&anonymous, 1, None) => panic!("the publish never ends"),
        () = publishing.notified() => assert_eq!(store.len(), 1, "created, and being published"),
    }
    assert_eq!(settled(&store).await, 0, "the caller went away: the record is deleted");

    struct Unknown {
        store: MemoryJobStore,
    }
    impl Hooks for Unknown {
        fn inner(&self) -> &dyn JobStore {
            &self.store
        }
        fn create<'a>(&'a self, r: &'a JobRecord, q: &'a Quota, n: u64) -> StoreFuture<'a, Result<(), CreateRefused>> {
            Box::pin(async move {
                self.store.create(r, q, n).await?.expect("within the quota");
                Err(StoreError::fault("job store unavailable: connection reset"))
            })
        }
        fn get<'a>(&'a self, _: &'a str, _: &'a str, _: u64) -> StoreFuture<'a, Option<JobRecord>> {
            Box::pin(async { Err(StoreError::fault("job store unavailable: connection reset")) })
        }
    }
    let store = Arc::new(Hooked(Unknown { store: MemoryJobStore::new() }));
    let (jobs, queue) = service(store.clone(), Arc::new(ManualClock::new(0)));
    let error = jobs.submit(&anonymous, 1, None).await.unwrap_err();
    assert!(error.starts_with("job store unavailable"), "{error}");
    assert_eq!((settled(&store.store).await, queue.pending_len()), (0, 0), "nothing stored, nothing enqueued");
}

/// A delivery whose consumer panics (here, its store's client) is a failed delivery, retried, and
/// leaves a `panic` line saying where under the message's id, as a request's panic does; before,
/// the in-process queue contained it silently.
#[tokio::test]
async fn a_delivery_that_panicked_is_logged_where_it_happened() {
    struct Breaks {
        store: MemoryJobStore,
    }
    impl Hooks for Breaks {
        fn inner(&self) -> &dyn JobStore {
            &self.store
        }
        fn advance<'a>(&'a self, _: &'a str, _: &'a str, _: u32, _: u64) -> StoreFuture<'a, Option<Advanced>> {
            Box::pin(async { panic!("the store's client broke") })
        }
    }
    vercel_mcp::observe::install_panic_hook();
    let store = Arc::new(Hooked(Breaks { store: MemoryJobStore::new() }));
    let mut config = config(store, Arc::new(ManualClock::new(0)));
    let sink = Arc::new(vercel_mcp::observe::MemorySink::default());
    config.log_sink = sink.clone();
    let queue = config.jobs.local_queue.clone().unwrap();
    let _routes = Routes::with_mcp(mcp_app(&config)).with_jobs(&config);
    config.job_service().submit(&Principal::anonymous(), 1, None).await.unwrap();
    assert_eq!(queue.deliver_next().await, Some(http::StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(queue.pending_len(), 1, "retried");
    let lines = sink.lines();
    let panic = lines.iter().find(|l| l["event"] == "panic").expect("a panic line");
    assert!(panic["messageId"].as_str().is_some_and(|id| !id.is_empty()), "{panic}");
    assert!(panic["location"].as_str().unwrap().contains("tests/it/jobs.rs"), "{panic}");
    assert_eq!(vercel_mcp::observe::take_panic_location(), None, "taken by the line");
}

/// A test store around another: every operation goes to `inner()`, except where the hooks
/// step in (a crash, a cancel, a count).
trait Hooks: Send + Sync + 'static {
    fn inner(&self) -> &dyn JobStore;
    fn create<'a>(&'a self, r: &'a JobRecord, q: &'a Quota, n: u64) -> StoreFuture<'a, Result<(), CreateRefused>> {
        self.inner().create(r, q, n)
    }
    fn advance<'a>(&'a self, o: &'a str, j: &'a str, e: u32, n: u64) -> StoreFuture<'a, Option<Advanced>> {
        self.inner().advance(o, j, e, n)
    }
    fn get<'a>(&'a self, o: &'a str, j: &'a str, n: u64) -> StoreFuture<'a, Option<JobRecord>> {
        self.inner().get(o, j, n)
    }
    fn sweep(&self, n: u64) -> StoreFuture<'_, SweepReport> {
        self.inner().sweep(n)
    }
}

/// The [`JobStore`] of a set of [`Hooks`]; dereferences to them, so a test reads their counts.
struct Hooked<H>(H);

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.0
    }
}

impl<H: Hooks> JobStore for Hooked<H> {
    fn create<'a>(&'a self, r: &'a JobRecord, q: &'a Quota, n: u64) -> StoreFuture<'a, Result<(), CreateRefused>> {
        self.0.create(r, q, n)
    }
    fn get<'a>(&'a self, o: &'a str, j: &'a str, n: u64) -> StoreFuture<'a, Option<JobRecord>> {
        self.0.get(o, j, n)
    }
    fn cancel<'a>(&'a self, o: &'a str, j: &'a str, n: u64) -> StoreFuture<'a, Option<JobRecord>> {
        self.0.inner().cancel(o, j, n)
    }
    fn abandon<'a>(&'a self, o: &'a str, j: &'a str, n: u64) -> StoreFuture<'a, Option<JobRecord>> {
        self.0.inner().abandon(o, j, n)
    }
    fn advance<'a>(&'a self, o: &'a str, j: &'a str, e: u32, n: u64) -> StoreFuture<'a, Option<Advanced>> {
        self.0.advance(o, j, e, n)
    }
    fn delete<'a>(&'a self, r: &'a JobRecord) -> StoreFuture<'a, ()> {
        self.0.inner().delete(r)
    }
    fn sweep(&self, n: u64) -> StoreFuture<'_, SweepReport> {
        self.0.sweep(n)
    }
}

/// A store that fails (as a crashed consumer would stop) after a number of steps.
struct CrashAfter {
    inner: Arc<dyn JobStore>,
    steps_left: AtomicU32,
}

impl Hooks for CrashAfter {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }
    fn advance<'a>(&'a self, o: &'a str, j: &'a str, e: u32, n: u64) -> StoreFuture<'a, Option<Advanced>> {
        if self.steps_left.fetch_sub(1, Ordering::SeqCst) == 0 {
            return Box::pin(async { Err(StoreError::fault("consumer crashed")) });
        }
        self.inner.advance(o, j, e, n)
    }
}

#[tokio::test]
async fn a_consumer_that_crashes_mid_job_resumes_on_redelivery() {
    let store = Arc::new(MemoryJobStore::new());
    let clock = Arc::new(ManualClock::new(0));
    let (jobs, _) = service(store.clone(), clock.clone());
    let owner = Principal::anonymous();
    let handle = jobs.submit(&owner, 10, None).await.unwrap().job_id;
    let config = config(store.clone(), clock.clone());
    let mut crashing = vercel_mcp::consumer(&config);
    crashing.store = Arc::new(Hooked(CrashAfter { inner: store.clone(), steps_left: AtomicU32::new(4) }));
    let job_id = vercel_mcp::jobs::handle::open(&config.settings.sealer, owner.id(), &handle).unwrap();
    let message = JobMessage { job_id, owner_id: owner.id().into(), steps: 10, traceparent: None };
    assert!(crashing.process(&message).await.is_err(), "the first delivery dies after 4 steps");
    assert_eq!(jobs.status(&owner, &handle).await.unwrap().completed_steps, 4);
    let healthy = vercel_mcp::consumer(&config);
    healthy.process(&message).await.unwrap();
    let result = jobs.result(&owner, &handle).await.unwrap();
    assert_eq!(result.result, Some(JobResult { sum: 45, steps_run: 10 }), "every step ran exactly once");
}

/// A store whose every step fails (a fault that outlives the queue's attempts).
struct StepsFail {
    inner: Arc<dyn JobStore>,
}

impl Hooks for StepsFail {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }
    fn advance<'a>(&'a self, _: &'a str, _: &'a str, _: u32, _: u64) -> StoreFuture<'a, Option<Advanced>> {
        Box::pin(async { Err(StoreError::fault("the step's write failed")) })
    }
}

/// The local queue gives a message up after its attempts, as the Redis stream dead-letters one:
/// its job is failed then, not read as pending until its deadline, and its owner's slot is free.
#[tokio::test]
async fn a_job_whose_deliveries_all_fail_is_failed_when_the_local_queue_gives_it_up() {
    let store = Arc::new(MemoryJobStore::new());
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (jobs, queue) = service(store.clone(), clock.clone());
    let mut consumer = vercel_mcp::consumer(&config(store.clone(), clock.clone()));
    consumer.store = Arc::new(Hooked(StepsFail { inner: store.clone() }));
    consumer.queue = Arc::new(queue.clone());
    queue.connect_consumer(Arc::new(consumer));
    let owner = Principal::anonymous();
    let handle = jobs.submit(&owner, 3, None).await.unwrap().job_id;
    let second = jobs.submit(&owner, 3, None).await.unwrap().job_id;
    let error = jobs.submit(&owner, 3, None).await.unwrap_err();
    assert!(error.contains("active"), "an anonymous caller has two slots: {error}");
    let mut deliveries = 0;
    while let Some(status) = queue.deliver_next().await {
        assert_eq!(status, http::StatusCode::INTERNAL_SERVER_ERROR);
        deliveries += 1;
    }
    assert_eq!(deliveries, 16, "eight attempts for each message, then nothing is pending");
    for handle in [&handle, &second] {
        let status = jobs.status(&owner, handle).await.unwrap();
        assert_eq!((status.state, status.completed_steps), ("failed", 0), "given up, so failed at once");
        assert_eq!(jobs.result(&owner, handle).await.unwrap().result, None);
    }
    jobs.submit(&owner, 3, None).await.expect("the failed jobs freed their owner's slots");
}

/// Cancels the job after a number of steps, from inside the step loop (a client's cancel_job
/// landing while the consumer works).
struct CancelAfter {
    inner: Arc<MemoryJobStore>,
    steps: AtomicU32,
    at: u32,
}

impl Hooks for CancelAfter {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }
    fn advance<'a>(&'a self, o: &'a str, j: &'a str, e: u32, n: u64) -> StoreFuture<'a, Option<Advanced>> {
        Box::pin(async move {
            if self.steps.fetch_add(1, Ordering::SeqCst) == self.at {
                self.inner.cancel(o, j, n).await?;
            }
            self.inner.advance(o, j, e, n).await
        })
    }
}

#[tokio::test]
async fn cancelling_mid_run_stops_at_the_next_step_boundary() {
    let store = Arc::new(MemoryJobStore::new());
    let clock = Arc::new(ManualClock::new(0));
    let (jobs, _) = service(store.clone(), clock.clone());
    let owner = Principal::anonymous();
    let handle = jobs.submit(&owner, 10, None).await.unwrap().job_id;
    let config = config(store.clone(), clock);
    let mut consumer = vercel_mcp::consumer(&config);
    consumer.store = Arc::new(Hooked(CancelAfter { inner: store.clone(), steps: AtomicU32::new(0), at: 2 }));
    let job_id = vercel_mcp::jobs::handle::open(&config.settings.sealer, owner.id(), &handle).unwrap();
    consumer.process(&JobMessage { job_id, owner_id: owner.id().into(), steps: 10, traceparent: None }).await.unwrap();
    let status = jobs.status(&owner, &handle).await.unwrap();
    assert_eq!((status.state, status.completed_steps), ("cancelled", 2));
    assert_eq!(jobs.result(&owner, &handle).await.unwrap().result, None);
}

/// What a client sees of a stuck job does not depend on the sweep's schedule (Hobby runs it once
/// a day): past its deadline the job reads `failed`, its slot is free, it cannot be cancelled or
/// advanced, and it is forgotten its retention after the deadline, all with no sweep at all.
#[tokio::test]
async fn a_stuck_job_fails_at_its_deadline_without_the_sweep() {
    use vercel_mcp::jobs::model::{JOB_DEADLINE_MS, JOB_RETENTION_MS, MAX_ACTIVE_JOBS_ANONYMOUS};
    let env = env().await;
    let mut handles = Vec::new();
    for _ in 0..MAX_ACTIVE_JOBS_ANONYMOUS {
        handles.push(payload(&env.submit(json!(3)).await)["jobId"].as_str().unwrap().to_owned());
    }
    assert_eq!(env.submit(json!(1)).await["isError"], true, "the anonymous cap is full");
    env.clock.advance_ms(JOB_DEADLINE_MS - 1);
    assert_eq!(payload(&env.call("get_job_status", &handles[0]).await)["state"], "pending", "not before the deadline");
    env.clock.advance_ms(1);
    let status = payload(&env.call("get_job_status", &handles[0]).await);
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(payload(&env.call("cancel_job", &handles[1]).await)["state"], "failed", "a cancel cannot revive it");
    env.queue.drain().await;
    assert_eq!(
        payload(&env.call("get_job_status", &handles[0]).await)["completedSteps"],
        0,
        "a late delivery runs nothing"
    );
    let fresh = payload(&env.submit(json!(1)).await);
    assert_eq!(fresh["state"], "pending", "the stuck jobs' slots are free: {fresh}");
    env.clock.advance_ms(JOB_RETENTION_MS - 1);
    assert_eq!(
        payload(&env.call("get_job_status", &handles[0]).await)["state"],
        "failed",
        "retained from the deadline"
    );
    env.clock.advance_ms(1);
    let gone = env.call("get_job_status", &handles[0]).await;
    assert_eq!(gone["isError"], true, "forgotten a retention after the deadline: {gone}");
    // Any operation sees the store as of its clock: reading the fresh job evicts the expired ones.
    assert_eq!(payload(&env.call("get_job_status", fresh["jobId"].as_str().unwrap()).await)["state"], "pending");
    assert_eq!(env.store.len(), 1, "only the fresh job is left, with no sweep run");
}

/// The capacity attack: one caller submits and cancels as fast as it can. Cancelling frees its
/// active slot at once, but the cancelled jobs still count against its share until they expire,
/// so it is stopped at its share and every other caller can still submit; the deployment-wide
/// total is never reached. Its submission rate is capped per minute as well.
#[tokio::test]
async fn one_caller_cannot_take_the_job_capacity_from_everyone() {
    use vercel_mcp::jobs::model::JOB_RETENTION_MS;
    use vercel_mcp::jobs::service::{DEFAULT_JOB_SHARE, DEFAULT_JOBS_PER_MINUTE};
    let store = Arc::new(MemoryJobStore::new());
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (jobs, _queue) = service(store.clone(), clock.clone());
    let (mallory, alice) =
        (Principal::verified(Some("mallory"), None, vec![]), Principal::verified(Some("alice"), None, vec![]));
    let mut refusal = None;
    for _ in 0..1000 {
        match jobs.submit(&mallory, 1, None).await {
            Ok(job) => {
                jobs.cancel(&mallory, &job.job_id).await.unwrap();
            }
            Err(error) => {
                refusal = Some(error);
                break;
            }
        }
    }
    let refusal = refusal.expect("the churn was stopped");
    assert!(refusal.contains(&format!("at most {DEFAULT_JOB_SHARE} jobs per caller")), "{refusal}");
    assert_eq!(store.len(), DEFAULT_JOB_SHARE as usize, "held no more than its share");
    let fair = jobs.submit(&alice, 1, None).await;
    assert!(fair.is_ok(), "another caller still gets a job: {fair:?}");
    // Cancelled jobs leave the share when they expire.
    clock.advance_ms(JOB_RETENTION_MS);
    assert!(jobs.submit(&mallory, 1, None).await.is_ok(), "the share is free again once its jobs expire");

    // The rate, with a share large enough not to stop it first: a fresh caller creates exactly
    // DEFAULT_JOBS_PER_MINUTE jobs in one minute, and more in the next.
    let limits = vercel_mcp::jobs::service::JobLimits { share: 1000, total: 1000, ..Default::default() };
    let jobs = jobs.with_limits(limits);
    clock.advance_ms(60_000 - vercel_mcp::state::Clock::now_ms(clock.as_ref()) % 60_000);
    let eve = Principal::verified(Some("eve"), None, vec![]);
    let mut created = 0;
    let error = loop {
        match jobs.submit(&eve, 1, None).await {
            Ok(job) => {
                created += 1;
                jobs.cancel(&eve, &job.job_id).await.unwrap();
            }
            Err(error) => break error,
        }
    };
    assert!(error.contains(&format!("at most {DEFAULT_JOBS_PER_MINUTE} a minute")), "{error}");
    assert_eq!(created, DEFAULT_JOBS_PER_MINUTE);
    clock.advance_ms(60_000);
    assert!(jobs.submit(&eve, 1, None).await.is_ok(), "a new minute, a new allowance");
}

/// Records every step a store actually applies, independently of the job's result (which is
/// computed from the step count, so it cannot show a step applied twice): each advance gets its
/// own timestamp, and a call applied its step (the one after `expected`) exactly when the record
/// it returns carries that timestamp and is not cancelled; a refused compare-and-set returns the
/// record as another call left it. Two writes for one `expected` are one step applied twice. Its first
/// `rendezvous` advances wait for each other, so duplicate deliveries reach the compare-and-set
/// at the same moment.
struct CountingStore {
    inner: Arc<dyn JobStore>,
    /// The step (its expected count before) of every advance that wrote the record.
    applied: std::sync::Mutex<Vec<u32>>,
    barrier: tokio::sync::Barrier,
    arrivals: AtomicU32,
    rendezvous: u32,
}

impl CountingStore {
    fn new(inner: Arc<dyn JobStore>, rendezvous: u32) -> Self {
        let barrier = tokio::sync::Barrier::new(rendezvous.max(1) as usize);
        Self { inner, applied: Default::default(), barrier, arrivals: AtomicU32::new(0), rendezvous }
    }
}

impl Hooks for CountingStore {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }
    fn advance<'a>(&'a self, o: &'a str, j: &'a str, e: u32, n: u64) -> StoreFuture<'a, Option<Advanced>> {
        Box::pin(async move {
            let arrival = self.arrivals.fetch_add(1, Ordering::SeqCst);
            if arrival < self.rendezvous {
                self.barrier.wait().await;
            }
            let stamp = n + 1 + u64::from(arrival);
            let advanced = self.inner.advance(o, j, e, stamp).await?;
            // Applied by this call, and not a cancellation: a step was applied.
            let cancelled = vercel_mcp::jobs::model::JobState::Cancelled;
            if advanced.as_ref().is_some_and(|a| a.applied && a.record.state != cancelled) {
                self.applied.lock().unwrap().push(e);
            }
            Ok(advanced)
        })
    }
}

/// Duplicate deliveries at the same time, at the start and in the middle of a job, against the
/// memory store and Redis: each step is applied exactly once, counted where it is applied.
async fn duplicates_apply_each_step_once(inner: Arc<dyn JobStore>) {
    const STEPS: u32 = 6;
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (jobs, _queue) = service(inner.clone(), clock.clone());
    let owner = Principal::verified(Some("dup"), None, vec![]);
    let config = config(inner.clone(), clock.clone());
    for (copies, head_start) in [(2, 0), (3, 0), (2, 3)] {
        let handle = jobs.submit(&owner, i64::from(STEPS), None).await.unwrap().job_id;
        let job_id = vercel_mcp::jobs::handle::open(&config.settings.sealer, owner.id(), &handle).unwrap();
        let message = JobMessage { job_id, owner_id: owner.id().into(), steps: STEPS, traceparent: None };
        // A first delivery runs `head_start` steps alone, then dies; the duplicates meet mid-job.
        if head_start > 0 {
            let mut partial = vercel_mcp::consumer(&config);
            partial.store =
                Arc::new(Hooked(CrashAfter { inner: inner.clone(), steps_left: AtomicU32::new(head_start) }));
            assert!(partial.process(&message).await.is_err());
        }
        let counting = Arc::new(Hooked(CountingStore::new(inner.clone(), copies)));
        let deliveries = (0..copies).map(|_| {
            let mut consumer = vercel_mcp::consumer(&config);
            consumer.store = counting.clone();
            let message = message.clone();
            tokio::spawn(async move { consumer.process(&message).await })
        });
        for delivery in deliveries.collect::<Vec<_>>() {
            common::bounded("a duplicate delivery", delivery).await.unwrap().unwrap();
        }
        let mut applied = counting.applied.lock().unwrap().clone();
        applied.sort_unstable();
        let once: Vec<u32> = (head_start..STEPS).collect();
        assert_eq!(applied, once, "{copies} copies from step {head_start}: each step applied exactly once");
        let status = jobs.status(&owner, &handle).await.unwrap();
        assert_eq!((status.state, status.completed_steps), ("done", STEPS));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn concurrent_duplicate_deliveries_apply_each_step_once_in_memory() {
    duplicates_apply_each_step_once(Arc::new(MemoryJobStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn concurrent_duplicate_deliveries_apply_each_step_once_in_redis() {
    let Some((url, _guard)) = common::redis::redis() else { return };
    let store = vercel_mcp::jobs::redis_store::RedisJobStore::new(
        vercel_mcp::store::Redis::connect(&url, &common::redis::unique_prefix("dup")).unwrap(),
    );
    duplicates_apply_each_step_once(Arc::new(store)).await;
}

/// Counts the sweeps that reach the store.
struct SweepCounter {
    inner: Arc<dyn JobStore>,
    sweeps: AtomicU32,
}

impl Hooks for SweepCounter {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }
    fn sweep(&self, n: u64) -> StoreFuture<'_, SweepReport> {
        self.sweeps.fetch_add(1, Ordering::SeqCst);
        self.inner.sweep(n)
    }
}

/// The cron route is public: a call without `CRON_SECRET`, or with a wrong or differently long
/// one, gets 401 and never reaches the store; only the right secret sweeps.
#[tokio::test]
async fn an_unauthorised_sweep_never_reaches_the_store() {
    let counter = Arc::new(Hooked(SweepCounter { inner: Arc::new(MemoryJobStore::new()), sweeps: AtomicU32::new(0) }));
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = config(counter.clone(), clock);
    let server = TestServer::start_routes(Routes::with_mcp(mcp_app(&config)).with_jobs(&config)).await;
    let path = "/api/cron/sweep-jobs";
    let secret = "cron-secret-for-tests-0123456789";
    for authorization in [None, Some("Bearer wrong"), Some("Bearer cron-secret-for-tests-012345678"), Some(secret)] {
        let mut call = server.request("GET", path);
        if let Some(value) = authorization {
            call = call.header("Authorization", value);
        }
        assert_eq!(call.send().await.status, 401, "{authorization:?}");
    }
    assert_eq!(counter.sweeps.load(Ordering::SeqCst), 0, "no refused call swept anything");
    let swept = server.request("GET", path).header("Authorization", &format!("Bearer {secret}")).send().await;
    assert_eq!(swept.status, 200);
    assert_eq!(counter.sweeps.load(Ordering::SeqCst), 1);
}

/// The consumer acknowledges a delivery only when it is done with it: one that runs out of its
/// time budget answers 202 and one whose store fails answers 500; neither acknowledges, so the
/// queue keeps the message to offer again (the crash test shows a redelivery finishing a job).
#[tokio::test]
async fn deliveries_that_do_not_finish_are_not_acknowledged() {
    let store = Arc::new(MemoryJobStore::new());
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let mut config = config(store.clone(), clock.clone());
    config.settings.consumer_budget = std::time::Duration::ZERO; // every delivery defers before its first step
    let queue = config.jobs.local_queue.clone().unwrap();
    let routes = Routes::with_mcp(mcp_app(&config)).with_jobs(&config);
    let server = TestServer::start_routes(routes).await;
    let handle =
        payload(&server.call_tool("submit_job", json!({"steps": 2})).await)["jobId"].as_str().unwrap().to_owned();
    assert_eq!(queue.deliver_next().await, Some(http::StatusCode::ACCEPTED), "deferred");
    assert_eq!(queue.pending_len(), 1, "not acknowledged: the message is offered again");
    let status = payload(&server.call_tool("get_job_status", json!({"jobId": handle})).await);
    assert_eq!(status["completedSteps"], 0);

    // A store that fails: 500, not acknowledged either.
    let mut failing = config.clone();
    failing.jobs.store = Arc::new(UnconfiguredJobStore("the store is down"));
    failing.settings.consumer_budget = std::time::Duration::from_secs(50);
    let other = LocalQueue::new();
    let mut consumer = vercel_mcp::consumer(&failing);
    consumer.queue = Arc::new(other.clone());
    other.connect_consumer(Arc::new(consumer));
    let message = JobMessage {
        job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        owner_id: "anonymous".into(),
        steps: 1,
        traceparent: None,
    };
    vercel_mcp::jobs::queue::Publisher::publish(&other, &message, None).await.unwrap();
    assert_eq!(other.deliver_next().await, Some(http::StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(other.pending_len(), 1, "still not acknowledged");
}

/// A whole number sent as a float (`3.0`) is an integer, as the schema and JavaScript take it:
/// `steps: 3.0` submits a three-step job, where the typed read once refused it with a Rust type
/// name; `3.5` is still refused, by the schema.
#[tokio::test]
async fn a_whole_number_sent_as_a_float_is_an_integer() {
    let env = env().await;
    let submitted = payload(&env.submit(json!(3.0)).await);
    assert_eq!(submitted["totalSteps"], 3, "{submitted}");
    let refused = env.submit(json!(3.5)).await;
    assert_eq!(refused["isError"], true);
    assert!(!error_text(&refused).contains("i64"), "{}", error_text(&refused));
}

/// A step begins only if it ends within the delivery's budget, its pause included: with a 300 ms
/// budget and 200 ms steps, a delivery takes one step and defers the rest (not acknowledged), and
/// the next delivery takes the next. Before, the second step began at 200 ms and ended past the
/// budget, where the platform would have cut the delivery off. (Tokio's clock, paused: the
/// budget is measured in it.)
#[tokio::test(start_paused = true)]
async fn a_step_begins_only_if_it_ends_within_the_budget() {
    let store = Arc::new(MemoryJobStore::new());
    let now = 1_700_000_000_000;
    let mut config = config(store.clone(), Arc::new(ManualClock::new(now)));
    config.settings.consumer_budget = std::time::Duration::from_millis(300);
    config.settings.job_step_delay = std::time::Duration::from_millis(200);
    let record = JobRecord::new("S".repeat(22), "anonymous".into(), 3, now);
    store.create(&record, &Quota::new(8, 256), now).await.unwrap().unwrap();
    // The queue the consumer confirms and acknowledges with.
    let queue = config.jobs.local_queue.clone().unwrap();
    queue.connect_consumer(Arc::new(vercel_mcp::consumer(&config)));
    let message =
        JobMessage { job_id: record.job_id.clone(), owner_id: record.owner_id.clone(), steps: 3, traceparent: None };
    vercel_mcp::jobs::queue::Publisher::publish(&queue, &message, None).await.unwrap();
    for taken in 1..=2 {
        assert_eq!(queue.deliver_next().await, Some(http::StatusCode::ACCEPTED), "deferred after a step");
        assert_eq!(queue.pending_len(), 1, "not acknowledged");
        let stored = store.get("anonymous", &record.job_id, now).await.unwrap().unwrap();
        assert_eq!(stored.completed_steps, taken);
    }
    assert_eq!(queue.deliver_next().await, Some(http::StatusCode::OK), "the last step finishes it");
    assert_eq!(queue.pending_len(), 0, "acknowledged");
}

/// A push's budget counts from its arrival, not from its lease's confirmation: confirming is
/// time the function has spent. With a 3 s budget, a confirmation that takes 2 s and 600 ms
/// steps, a delivery takes one step and defers the rest; counted from the confirmation it took
/// all three, and then acknowledged past the time the budget was sized to leave. (Tokio's clock,
/// paused.)
#[tokio::test(start_paused = true)]
async fn a_deliverys_budget_counts_from_its_arrival() {
    use std::time::Duration;
    use vercel_mcp::jobs::queue::{Confirmation, Lease, QueueApi, QueueFuture};
    struct SlowToConfirm(LocalQueue);
    impl QueueApi for SlowToConfirm {
        fn consumer_group(&self) -> &str {
            self.0.consumer_group()
        }
        fn confirm<'a>(&'a self, lease: &'a Lease, visibility: Duration) -> QueueFuture<'a, Confirmation> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                self.0.confirm(lease, visibility).await
            })
        }
        fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()> {
            self.0.ack(lease)
        }
    }
    let store = Arc::new(MemoryJobStore::new());
    let now = 1_700_000_000_000;
    let mut config = config(store.clone(), Arc::new(ManualClock::new(now)));
    config.settings.consumer_budget = Duration::from_secs(3);
    config.settings.job_step_delay = Duration::from_millis(600);
    let record = JobRecord::new("B".repeat(22), "anonymous".into(), 3, now);
    store.create(&record, &Quota::new(8, 256), now).await.unwrap().unwrap();
    let queue = LocalQueue::new();
    let mut consumer = vercel_mcp::consumer(&config);
    consumer.queue = Arc::new(SlowToConfirm(queue.clone()));
    queue.connect_consumer(Arc::new(consumer));
    let message =
        JobMessage { job_id: record.job_id.clone(), owner_id: record.owner_id.clone(), steps: 3, traceparent: None };
    vercel_mcp::jobs::queue::Publisher::publish(&queue, &message, None).await.unwrap();
    assert_eq!(queue.deliver_next().await, Some(http::StatusCode::ACCEPTED), "deferred after what was left");
    let stored = store.get("anonymous", &record.job_id, now).await.unwrap().unwrap();
    assert_eq!(stored.completed_steps, 1, "a second left after the confirmation: one step");
}

/// A delivery that defers after advancing its job asks the queue for the next one at once; when
/// the queue cannot be asked, the delivery still answers 202 unacknowledged (the message comes
/// back when its visibility runs out, as before) and a `job.fault` line says what failed. A
/// delivery that defers before any step (its budget too short for one) asks nothing: asked back
/// at once, it would only defer again. A delivery that finishes asks nothing of the kind.
#[tokio::test(start_paused = true)]
async fn a_deferral_asks_for_the_next_delivery_only_after_progress() {
    use std::sync::Mutex;
    use std::time::Duration;
    use vercel_mcp::jobs::queue::{Confirmation, Lease, QueueApi, QueueFuture};
    struct Rescheduling {
        queue: LocalQueue,
        asked: Mutex<Vec<Duration>>,
    }
    impl QueueApi for Rescheduling {
        fn consumer_group(&self) -> &str {
            self.queue.consumer_group()
        }
        fn confirm<'a>(&'a self, lease: &'a Lease, visibility: Duration) -> QueueFuture<'a, Confirmation> {
            self.queue.confirm(lease, visibility)
        }
        fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()> {
            self.queue.ack(lease)
        }
        fn resume_after<'a>(&'a self, _: &'a Lease, after: Duration) -> QueueFuture<'a, ()> {
            self.asked.lock().unwrap().push(after);
            Box::pin(async { Err("the queue API is unreachable".to_owned()) })
        }
    }
    let store = Arc::new(MemoryJobStore::new());
    let now = 1_700_000_000_000;
    let mut config = config(store.clone(), Arc::new(ManualClock::new(now)));
    let sink = Arc::new(vercel_mcp::observe::MemorySink::default());
    config.log_sink = sink.clone();
    config.settings.job_step_delay = Duration::from_millis(200);
    let record = JobRecord::new("C".repeat(22), "anonymous".into(), 3, now);
    store.create(&record, &Quota::new(8, 256), now).await.unwrap().unwrap();
    let message =
        JobMessage { job_id: record.job_id.clone(), owner_id: record.owner_id.clone(), steps: 3, traceparent: None };
    let completed = || async { store.get("anonymous", &record.job_id, now).await.unwrap().unwrap().completed_steps };
    // A delivery with `budget`, on a queue of its own that records what it was asked.
    let deliver = |budget: Duration| {
        let (config, message) = (&config, &message);
        async move {
            let queue = LocalQueue::new();
            let rescheduling = Arc::new(Rescheduling { queue: queue.clone(), asked: Mutex::default() });
            let mut consumer = vercel_mcp::consumer(config);
            consumer.budget = budget;
            consumer.queue = rescheduling.clone();
            queue.connect_consumer(Arc::new(consumer));
            vercel_mcp::jobs::queue::Publisher::publish(&queue, message, None).await.unwrap();
            let status = queue.deliver_next().await;
            let asked = rescheduling.asked.lock().unwrap().clone();
            (status, queue.pending_len(), asked)
        }
    };

    // Too short for a step: deferred, not acknowledged, and the queue not asked.
    let (status, pending, asked) = deliver(Duration::from_millis(100)).await;
    assert_eq!((status, pending), (Some(http::StatusCode::ACCEPTED), 1), "deferred, not acknowledged");
    assert!(asked.is_empty(), "a delivery that got nowhere is not asked back at once: {asked:?}");
    assert_eq!(completed().await, 0);
    assert!(sink.lines().iter().all(|l| l["event"] != "job.fault"), "nothing failed");

    // One step, then deferred: the next delivery is asked for at once, and its failure logged.
    let (status, pending, asked) = deliver(Duration::from_millis(300)).await;
    assert_eq!((status, pending), (Some(http::StatusCode::ACCEPTED), 1), "deferred all the same");
    assert_eq!(asked, [vercel_mcp::jobs::consumer::RESUME_AFTER_DEFERRAL]);
    assert_eq!(completed().await, 1);
    let fault = sink.lines().into_iter().find(|l| l["event"] == "job.fault").expect("a job.fault line");
    assert_eq!(
        (fault["operation"].as_str(), fault["detail"].as_str()),
        (Some("resume"), Some("the queue API is unreachable"))
    );

    // With a budget, the redelivery finishes the job and reschedules nothing.
    let (status, pending, asked) = deliver(Duration::from_secs(50)).await;
    assert_eq!((status, pending), (Some(http::StatusCode::OK), 0));
    assert!(asked.is_empty(), "a delivery that finishes is not rescheduled");
    assert_eq!(completed().await, 3);
}

/// A submit whose publish failed never happened, for the caller's per-minute rate too: with two
/// a minute, three failed submits still leave both, and then the third success is refused.
/// Memory and Redis alike.
#[tokio::test]
async fn a_rolled_back_submit_does_not_count_toward_the_rate() {
    let mut stores: Vec<Arc<dyn JobStore>> = vec![Arc::new(MemoryJobStore::new())];
    let redis = common::redis::redis();
    if let Some((url, _)) = &redis {
        let redis = vercel_mcp::store::Redis::connect(url, &common::redis::unique_prefix("rate-rollback")).unwrap();
        stores.push(Arc::new(vercel_mcp::jobs::redis_store::RedisJobStore::new(redis)));
    }
    for store in stores {
        let (jobs, _queue) = service(store.clone(), Arc::new(ManualClock::new(1_000)));
        let limits = vercel_mcp::jobs::service::JobLimits { per_minute: 2, ..Default::default() };
        let mut failing = jobs.clone().with_limits(limits);
        failing.set_publisher(Arc::new(FailingPublisher("queue down".into())));
        let working = jobs.with_limits(limits);
        let alice = Principal::verified(Some("alice"), None, vec![]);
        for _ in 0..3 {
            assert!(failing.submit(&alice, 1, None).await.unwrap_err().contains("could not enqueue"));
        }
        working.submit(&alice, 1, None).await.unwrap();
        working.submit(&alice, 1, None).await.unwrap();
        let refused = working.submit(&alice, 1, None).await.unwrap_err();
        assert!(refused.contains("at most 2 a minute"), "{refused}");
    }
}

/// The Vercel Queues client over HTTP, against a stand-in answering each lease call with a status
/// the test picks: how each answer to a confirmation and to a reschedule is read, and what every
/// lease call sends (the lease's own path, its token, this deployment's id, the visibility).
#[tokio::test]
async fn the_vercel_queue_client_reads_each_answer_to_a_lease_call() {
    use std::sync::Mutex;
    use std::time::Duration;
    use vercel_mcp::jobs::queue::{Confirmation, Lease, QueueApi, VercelQueue};
    let answer = Arc::new(AtomicU32::new(200));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (answering, recording) = (answer.clone(), seen.clone());
    let addr = common::upstream::serve(move |request| {
        let record = (
            request.method.clone(),
            request.path().to_owned(),
            request.header("authorization"),
            request.header("vqs-deployment-id"),
            serde_json::from_slice::<Value>(&request.body).ok(),
        );
        recording.lock().unwrap().push(record);
        let status = answering.load(Ordering::SeqCst) as u16;
        async move { (status, bytes::Bytes::new()) }
    })
    .await;
    let queue = VercelQueue::new(Some(format!("http://{addr}")), None, Some("dpl_ours".into()), None);
    let lease = Lease {
        region: Some("iad1".into()),
        topic: "mcp-jobs".into(),
        group: "api_Squeues_Sprocess-job_Drs".into(),
        receipt: "receipt-7".into(),
        message_id: "msg-7".into(),
        oidc_token: Some("delivery-token".into()),
    };
    let answered = |status: u32| {
        answer.store(status, Ordering::SeqCst);
    };

    for (status, read) in [
        (200, Ok(Confirmation::Live)),
        (410, Ok(Confirmation::Redundant("already_processed"))),
        (409, Ok(Confirmation::Redundant("not_available"))),
        (404, Ok(Confirmation::Unknown)),
        (401, Err("refused this deployment's token (HTTP 401)")),
        (403, Err("refused this deployment's token (HTTP 403)")),
        (500, Err("could not confirm the lease (HTTP 500)")),
    ] {
        answered(status);
        let confirmed = queue.confirm(&lease, Duration::from_secs(33)).await;
        match (read, confirmed) {
            (Ok(expected), Ok(got)) => assert_eq!(got, expected, "HTTP {status}"),
            (Err(says), Err(error)) => assert!(error.contains(says), "HTTP {status}: {error}"),
            (expected, got) => panic!("HTTP {status}: expected {expected:?}, got {got:?}"),
        }
    }
    for (status, rescheduled) in [(200, true), (204, true), (404, false), (409, false), (429, false), (500, false)] {
        answered(status);
        match queue.resume_after(&lease, Duration::from_secs(1)).await {
            Ok(()) => assert!(rescheduled, "HTTP {status} read as rescheduled"),
            Err(error) => {
                assert!(!rescheduled, "HTTP {status}: {error}");
                assert!(error.contains(&format!("did not reschedule the lease (HTTP {status})")), "{error}");
            }
        }
    }

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 7 + 6, "one call each, no retries");
    for (index, (method, path, authorization, deployment, body)) in seen.iter().enumerate() {
        assert_eq!(method, http::Method::PATCH);
        assert_eq!(path, "/api/v3/topic/mcp-jobs/consumer/api_Squeues_Sprocess-job_Drs/lease/receipt-7");
        assert_eq!(authorization.as_deref(), Some("Bearer delivery-token"), "the delivery's own token");
        assert_eq!(deployment.as_deref(), Some("dpl_ours"));
        let visibility = if index < 7 { 33 } else { 1 };
        assert_eq!(body.as_ref(), Some(&json!({"visibilityTimeoutSeconds": visibility})), "call {index}");
    }
}
