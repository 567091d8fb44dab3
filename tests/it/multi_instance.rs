//! Several processes sharing Redis, as on Vercel: two MCP instances (the local-run binary) and
//! the queue consumer binary under `vercel_runtime`'s local mode, with a loopback stand-in for
//! the Vercel Queues REST API. A job submitted on one instance is polled on the other, survives
//! an instance restart, is run by the consumer, and finishes exactly once even when its message
//! is delivered twice.

use crate::common;

use bytes::Bytes;
use common::process::{Launch, Process, free_port};
use common::redis::{redis, unique_prefix};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

const SECRET: &str = "multi=0123456789abcdef0123456789abcdef";
const OIDC: &str = "test-oidc-token";
/// `VERCEL_PROJECT_ID` of the processes.
const PROJECT: &str = "prj_ours";
/// The deployment the instances say they are (`VERCEL_DEPLOYMENT_ID`).
const DEPLOYMENT: &str = "dpl_ours";

/// What the stand-in for Vercel Queues saw. As the documented API does, it confirms (PATCH) and
/// deletes (DELETE) only leases it handed out, of its one consumer group.
#[derive(Default)]
struct FakeQueue {
    published: Vec<(Option<String>, Option<String>, Bytes)>,
    /// Receipts of deliveries the stand-in made (the test delivers for it).
    leased: Vec<String>,
    /// Receipts of redundant deliveries: already processed (410), or another's now (409).
    processed: Vec<String>,
    locked: Vec<String>,
    confirmed: Vec<String>,
    /// The `visibilityTimeoutSeconds` of every lease PATCH that found its lease, in order.
    visibilities: Vec<u64>,
    acked: Vec<String>,
    /// Receipts whose next DELETE is answered 429, with this `Retry-After` if any.
    throttled: Vec<(String, Option<&'static str>)>,
    requests: usize,
    /// The `authorization` of every request, in order.
    bearers: Vec<String>,
    /// Requests that came without a `user-agent`.
    anonymous_agents: usize,
}

const GROUP: &str = "api_Squeues_Sprocess-job_Drs";

async fn start_fake_queue() -> (SocketAddr, Arc<Mutex<FakeQueue>>) {
    let state = Arc::new(Mutex::new(FakeQueue::default()));
    let shared = state.clone();
    let addr = common::upstream::serve_with_headers(move |request| {
        let state = shared.clone();
        async move {
            let auth = request.header("authorization");
            let mut state = state.lock().unwrap();
            state.requests += 1;
            state.bearers.push(auth.clone().unwrap_or_default());
            state.anonymous_agents += usize::from(request.header("user-agent").is_none());
            // A receipt belongs to the deployment that received its message, as the platform's
            // own client treats it: a lease call that does not name that deployment finds nothing.
            let lease_call = matches!(request.method, http::Method::PATCH | http::Method::DELETE);
            let deployment_named = request.header("vqs-deployment-id").as_deref() == Some(DEPLOYMENT);
            let lease = request
                .path()
                .strip_prefix(&format!("/api/v3/topic/jobs/consumer/{GROUP}/lease/"))
                .filter(|receipt| state.leased.iter().any(|r| r == receipt))
                .map(str::to_owned);
            let receipt_of = |path: &str| path.rsplit('/').next().map(str::to_owned).unwrap_or_default();
            let throttled = state.throttled.iter().position(|(r, _)| *r == receipt_of(request.path()));
            if let (true, Some(at)) = (request.method == http::Method::DELETE, throttled) {
                let (_, retry_after) = state.throttled.remove(at);
                let headers = retry_after.map(|after| vec![("retry-after", after.to_owned())]).unwrap_or_default();
                return (429, headers, Bytes::from_static(b"{}"));
            }
            let status = if auth.as_deref() != Some(&format!("Bearer {OIDC}")) {
                401
            } else if lease_call && !deployment_named {
                404
            } else if request.method == http::Method::PATCH && state.processed.contains(&receipt_of(request.path())) {
                410
            } else if request.method == http::Method::PATCH && state.locked.contains(&receipt_of(request.path())) {
                409
            } else if request.method == http::Method::POST && request.path() == "/api/v3/topic/jobs" {
                state.published.push((auth, request.header("vqs-idempotency-key"), request.body));
                201
            } else if let (true, Some(receipt)) = (request.method == http::Method::PATCH, &lease) {
                let asked: Value = serde_json::from_slice(&request.body).unwrap_or_default();
                match asked["visibilityTimeoutSeconds"].as_u64() {
                    Some(seconds) => {
                        state.confirmed.push(receipt.clone());
                        state.visibilities.push(seconds);
                        204
                    }
                    None => 400,
                }
            } else if let (true, Some(receipt)) = (request.method == http::Method::DELETE, lease) {
                state.leased.retain(|r| *r != receipt);
                state.acked.push(receipt);
                204
            } else {
                404
            };
            (status, Vec::new(), Bytes::from_static(b"{}"))
        }
    })
    .await;
    (addr, state)
}

fn spawn(binary: &str, port: u16, redis_url: &str, prefix: &str, queue: SocketAddr) -> Process {
    let queue = format!("http://{queue}");
    spawn_with(
        binary,
        port,
        &[
            ("REDIS_URL", redis_url),
            ("MCP_REDIS_PREFIX", prefix),
            ("MCP_STATE_SECRET", SECRET),
            ("MCP_QUEUE_BASE_URL", &queue),
            ("VERCEL_OIDC_TOKEN", OIDC),
            ("VERCEL_PROJECT_ID", PROJECT),
            ("VERCEL_DEPLOYMENT_ID", DEPLOYMENT),
            ("MCP_JOB_STEP_MS", "0"),
        ],
    )
}

/// `binary` on `port` with only `vars` (both binaries announce readiness on stdout once their
/// socket is bound).
fn spawn_with(binary: &str, port: u16, vars: &[(&str, &str)]) -> Process {
    Launch::binary(binary).on_port(port).envs(vars).start().0
}

async fn call(port: u16, tool: &str, arguments: Value) -> Value {
    let server = common::TestServer { addr: ([127, 0, 0, 1], port).into() };
    common::payload(&server.call_tool(tool, arguments).await)
}

async fn deliver(port: u16, body: &Bytes, receipt: &str) -> (u16, Value) {
    deliver_from(port, body, receipt, GROUP, OIDC).await
}

/// A push as the queue trigger makes it, for consumer group `group`, with `token` as the
/// invocation's `x-vercel-oidc-token`.
async fn deliver_from(port: u16, body: &Bytes, receipt: &str, group: &str, token: &str) -> (u16, Value) {
    let server = common::TestServer { addr: ([127, 0, 0, 1], port).into() };
    let reply = server
        .post_to("/api/queues/process-job", String::from_utf8(body.to_vec()).unwrap())
        .header("ce-type", "com.vercel.queue.v2beta")
        .header("ce-vqsqueuename", "jobs")
        .header("ce-vqsconsumergroup", group)
        .header("ce-vqsmessageid", "msg-1")
        .header("ce-vqsregion", "iad1")
        .header("ce-vqsreceipthandle", receipt)
        .header("x-vercel-oidc-token", token)
        .send()
        .await;
    (reply.status, reply.json())
}

#[tokio::test]
async fn the_mcp_function_serves_under_vercel_runtime_local_mode() {
    let (queue_addr, _) = start_fake_queue().await;
    let port = free_port();
    // No REDIS_URL needed for this: the function starts, announces itself and answers MCP.
    let _mcp = spawn_with(
        env!("CARGO_BIN_EXE_mcp"),
        port,
        &[("MCP_STATE_SECRET", SECRET), ("MCP_QUEUE_BASE_URL", &format!("http://{queue_addr}"))],
    );
    let server = common::TestServer { addr: ([127, 0, 0, 1], port).into() };
    let discover = server.modern(json!(1), "server/discover", json!({})).send().await;
    assert_eq!(discover.status, 200);
    assert_eq!(discover.json()["result"]["supportedVersions"], json!(["2026-07-28"]));
    let legacy = server
        .post(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#)
        .send()
        .await;
    assert_eq!(legacy.json()["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(server.request("GET", "/_vercel/ping").send().await.text(), "OK", "the runtime's own health route");
}

/// Each function reads at most its own body cap under `vercel_runtime`, as the local run does
/// per route: the queue consumer 64 KiB, the cron sweep 16 KiB, the metadata document 1 KiB. One
/// byte past it is 413 before the handler runs; the cap itself is read and handed on (here
/// refused for what it says).
#[tokio::test]
async fn each_function_reads_at_most_its_own_body_cap() {
    let functions = [
        (env!("CARGO_BIN_EXE_process-job"), "/api/queues/process-job", vercel_mcp::jobs::consumer::MAX_BODY_BYTES, 400),
        (env!("CARGO_BIN_EXE_sweep-jobs"), "/api/cron/sweep-jobs", vercel_mcp::jobs::sweep::MAX_BODY_BYTES, 401),
        (
            env!("CARGO_BIN_EXE_oauth-protected-resource"),
            "/.well-known/oauth-protected-resource",
            vercel_mcp::transport::auth::METADATA_MAX_BODY_BYTES,
            405,
        ),
    ];
    assert_eq!((functions[0].2, functions[1].2, functions[2].2), (64 * 1024, 16 * 1024, 1024));
    for (binary, path, cap, answer) in functions {
        let port = free_port();
        let _function = spawn_with(binary, port, &[("MCP_STATE_SECRET", SECRET)]);
        let server = common::TestServer { addr: ([127, 0, 0, 1], port).into() };
        let over = server.post_to(path, "x".repeat(cap + 1)).send().await;
        assert_eq!(over.status, 413, "{path}: {}", over.text());
        let at = server.post_to(path, "x".repeat(cap)).send().await;
        assert_eq!(at.status, answer, "{path}: read, then answered for what it is: {}", at.text());
    }
}

/// Calls `tool` on the MCP route at `path` and returns the job payload.
async fn call_at(port: u16, path: &str, tool: &str, arguments: Value) -> Value {
    let server = common::TestServer { addr: ([127, 0, 0, 1], port).into() };
    let reply =
        server.modern(json!(1), "tools/call", json!({"name": tool, "arguments": arguments})).at(path).send().await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    common::payload(&reply.json()["result"])
}

/// Without Vercel Queues (no `MCP_QUEUE_BASE_URL`, not deployed), each function process runs
/// the jobs it submits through its in-process queue, as the local run does. Before this, the
/// messages waited for a consumer that was never connected: jobs stayed pending and the queue
/// grew with every submit.
#[tokio::test]
async fn a_function_alone_runs_its_own_jobs_in_local_mode() {
    for (binary, path) in
        [(env!("CARGO_BIN_EXE_mcp"), "/api/mcp"), (env!("CARGO_BIN_EXE_example-routes"), "/api/examples/async-jobs")]
    {
        let port = free_port();
        let _function = spawn_with(binary, port, &[("MCP_STATE_SECRET", SECRET), ("MCP_JOB_STEP_MS", "0")]);
        let handle = call_at(port, path, "submit_job", json!({"steps": 3})).await["jobId"].as_str().unwrap().to_owned();
        // Polled until done: a generous bound, since the worker runs in another process.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut status = call_at(port, path, "get_job_status", json!({"jobId": handle})).await;
        while status["state"] != "done" && std::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
            status = call_at(port, path, "get_job_status", json!({"jobId": handle})).await;
        }
        assert_eq!((status["state"].clone(), status["completedSteps"].clone()), (json!("done"), json!(3)), "{binary}");
        let result = call_at(port, path, "get_job_result", json!({"jobId": handle})).await;
        assert_eq!(result["result"], json!({"sum": 3, "stepsRun": 3}), "{binary}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_crosses_instances_and_finishes_exactly_once() {
    let Some((redis_url, _guard)) = redis() else { return };
    let prefix = unique_prefix("multi");
    let (queue_addr, queue) = start_fake_queue().await;
    let (port_a, port_b, port_consumer) = (free_port(), free_port(), free_port());
    let local = env!("CARGO_BIN_EXE_local");
    let _a = spawn(local, port_a, &redis_url, &prefix, queue_addr);
    let b = spawn(local, port_b, &redis_url, &prefix, queue_addr);
    let _consumer = spawn(env!("CARGO_BIN_EXE_process-job"), port_consumer, &redis_url, &prefix, queue_addr);

    let submitted = call(port_a, "submit_job", json!({"steps": 5})).await;
    let handle = submitted["jobId"].as_str().unwrap().to_owned();
    let (key, message) = {
        let queue = queue.lock().unwrap();
        assert_eq!(queue.published.len(), 1, "submit published one message");
        (queue.published[0].1.clone().unwrap(), queue.published[0].2.clone())
    };
    let message_json: Value = serde_json::from_slice(&message).unwrap();
    assert_eq!(message_json["jobId"], key, "the idempotency key is the job id");
    assert_eq!(message_json["steps"], 5);

    assert_eq!(call(port_b, "get_job_status", json!({"jobId": handle})).await["state"], "pending", "B sees A's job");
    drop(b);
    let _b = spawn(local, port_b, &redis_url, &prefix, queue_addr);
    assert_eq!(
        call(port_b, "get_job_status", json!({"jobId": handle})).await["state"],
        "pending",
        "a restarted instance still sees it"
    );

    // A push the queue never made (a receipt it did not hand out) runs nothing.
    let (status, _) = deliver(port_consumer, &message, "forged-receipt").await;
    assert_eq!(status, 409, "an unconfirmed lease is refused");
    assert_eq!(call(port_b, "get_job_status", json!({"jobId": handle})).await["completedSteps"], 0);
    assert!(queue.lock().unwrap().acked.is_empty(), "and nothing is acknowledged");
    let asked = queue.lock().unwrap().requests;
    let (status, _) = deliver_from(port_consumer, &message, "receipt-1", "someone-elses-group", OIDC).await;
    assert_eq!(status, 400, "another consumer group is refused");
    assert_eq!(queue.lock().unwrap().requests, asked, "without the deployment's token going anywhere");

    // The invocation's token is used for the queue's calls only when it names this project: a
    // token the sender chose would let a queue of the sender's vouch for a forged push. (Both
    // pushes name a receipt the stand-in never handed out, so neither runs a step whatever the
    // token; what is checked is the one call each makes, and with which token.)
    let bearers_since = |before: usize| queue.lock().unwrap().bearers[before..].to_vec();
    let before = queue.lock().unwrap().bearers.len();
    let foreign = common::tokens::platform_token("prj_attacker");
    let (status, _) = deliver_from(port_consumer, &message, "forged-receipt", GROUP, &foreign).await;
    assert_eq!(status, 409);
    assert_eq!(bearers_since(before), [format!("Bearer {OIDC}")], "the deployment's own token, not the sender's");
    let before = queue.lock().unwrap().bearers.len();
    let ours = common::tokens::platform_token(PROJECT);
    let (status, _) = deliver_from(port_consumer, &message, "forged-receipt", GROUP, &ours).await;
    // The stand-in takes only its one token: a token of this deployment that the queue refuses
    // is a fault of ours, answered 500 (not acknowledged, so the message comes back).
    assert_eq!(status, 500);
    assert_eq!(bearers_since(before), [format!("Bearer {ours}")], "a token naming this project is used as sent");
    assert_eq!(call(port_b, "get_job_status", json!({"jobId": handle})).await["completedSteps"], 0);

    queue.lock().unwrap().leased.extend(["receipt-1".to_owned(), "receipt-2".to_owned()]);
    let (status, outcome) = deliver(port_consumer, &message, "receipt-1").await;
    assert_eq!((status, outcome["status"].clone()), (200, json!("success")));
    assert_eq!(queue.lock().unwrap().confirmed, ["receipt-1"], "the lease was confirmed before any step");
    assert_eq!(queue.lock().unwrap().visibilities, [80], "invisible for the 50 s budget and a 30 s margin");
    assert_eq!(queue.lock().unwrap().acked, ["receipt-1"], "the lease is acknowledged after success");
    let done = call(port_b, "get_job_status", json!({"jobId": handle})).await;
    assert_eq!((done["state"].clone(), done["completedSteps"].clone()), (json!("done"), json!(5)));
    let result = call(port_a, "get_job_result", json!({"jobId": handle})).await;
    assert_eq!(result["result"], json!({"sum": 10, "stepsRun": 5}));

    let (status, _) = deliver(port_consumer, &message, "receipt-2").await;
    assert_eq!(status, 200, "a redelivered message is acknowledged");
    assert_eq!(call(port_a, "get_job_result", json!({"jobId": handle})).await, result, "and changes nothing");
    assert_eq!(queue.lock().unwrap().acked, ["receipt-1", "receipt-2"]);

    // A delivery the queue calls redundant (410: already processed; 409: another's now) is
    // answered 200 `skipped` with the queue's reason, as Vercel's own consumer answers it, and
    // nothing runs or is acknowledged.
    queue.lock().unwrap().processed.push("receipt-3".into());
    queue.lock().unwrap().locked.push("receipt-4".into());
    for (receipt, reason) in [("receipt-3", "already_processed"), ("receipt-4", "not_available")] {
        let (status, outcome) = deliver(port_consumer, &message, receipt).await;
        assert_eq!((status, outcome), (200, json!({"status": "skipped", "reason": reason})), "{receipt}");
    }
    assert_eq!(queue.lock().unwrap().acked, ["receipt-1", "receipt-2"]);
    assert_eq!(call(port_a, "get_job_result", json!({"jobId": handle})).await, result);
    // Every call to the queue said who made it; the lease calls above named this deployment
    // (the stand-in finds no lease otherwise).
    assert_eq!(queue.lock().unwrap().anonymous_agents, 0, "a User-Agent on every queue request");
}

/// A delivery that runs out of its budget leaves the rest of the job for the next delivery and
/// asks the queue for it at once (its lease made visible again in a second), unacknowledged.
/// Without that, the next delivery waited for the visibility confirmed at the start, the budget
/// and its margin, to run out. Deliveries go on until one finishes the job; only that one is
/// acknowledged, and only the ones that deferred asked to be offered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_defers_asks_for_the_next_one_at_once() {
    let Some((redis_url, _guard)) = redis() else { return };
    let prefix = unique_prefix("multi-defer");
    let (queue_addr, queue) = start_fake_queue().await;
    let (port, port_consumer) = (free_port(), free_port());
    let _mcp = spawn(env!("CARGO_BIN_EXE_local"), port, &redis_url, &prefix, queue_addr);
    let queue_url = format!("http://{queue_addr}");
    let _consumer = spawn_with(
        env!("CARGO_BIN_EXE_process-job"),
        port_consumer,
        &[
            ("REDIS_URL", &redis_url),
            ("MCP_REDIS_PREFIX", &prefix),
            ("MCP_STATE_SECRET", SECRET),
            ("MCP_QUEUE_BASE_URL", &queue_url),
            ("VERCEL_OIDC_TOKEN", OIDC),
            ("VERCEL_PROJECT_ID", PROJECT),
            ("VERCEL_DEPLOYMENT_ID", DEPLOYMENT),
            ("MCP_CONSUMER_BUDGET_SECONDS", "3"),
            ("MCP_JOB_STEP_MS", "500"),
        ],
    );
    let handle = call(port, "submit_job", json!({"steps": 8})).await["jobId"].as_str().unwrap().to_owned();
    let message = queue.lock().unwrap().published[0].2.clone();

    // At most five 500 ms steps fit a 3 s budget, so eight take two deliveries at least.
    let (mut outcomes, mut done_before) = (Vec::new(), 0);
    for delivery in 1..=8 {
        let receipt = format!("receipt-{delivery}");
        queue.lock().unwrap().leased.push(receipt.clone());
        let (status, outcome) = deliver(port_consumer, &message, &receipt).await;
        outcomes.push((status, outcome["status"].clone()));
        let status_now = call(port, "get_job_status", json!({"jobId": handle})).await;
        if status == 200 {
            assert_eq!(outcome["status"], "success", "{outcome}");
            assert_eq!(status_now["state"], "done", "{status_now}");
            break;
        }
        assert_eq!((status, outcome["status"].clone()), (202, json!("deferred")), "{outcome}");
        assert_eq!(status_now["state"], "running", "{status_now}");
        let done = status_now["completedSteps"].as_u64().unwrap();
        assert!(done > done_before, "each delivery takes a step at least: {status_now}");
        done_before = done;
    }
    let deferred = outcomes.len() - 1;
    assert!(deferred >= 1 && outcomes.last().unwrap().0 == 200, "{outcomes:?}");
    let queue = queue.lock().unwrap();
    // Each delivery confirmed its lease for the budget and a 30 s margin; each that deferred
    // then asked for the next delivery in a second; the last, which finished, did not.
    let mut expected = Vec::new();
    for _ in 0..deferred {
        expected.extend([33, 1]);
    }
    expected.push(33);
    assert_eq!(queue.visibilities, expected, "{outcomes:?}");
    assert_eq!(queue.acked, [format!("receipt-{}", outcomes.len())], "only the delivery that finished is acknowledged");
}

/// An acknowledgement the queue throttles (429) is retried after the `Retry-After` it names, as
/// the platform's own client does, when that leaves time within one call's allowance: the
/// delivery then succeeds. A 429 with no `Retry-After`, or one naming a wait past that allowance,
/// is not waited for: the delivery answers 500, unacknowledged, and its redelivery finds the job
/// done and is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_acknowledgement_is_retried_when_the_queue_says_when() {
    let Some((redis_url, _guard)) = redis() else { return };
    let prefix = unique_prefix("multi-throttle");
    let (queue_addr, queue) = start_fake_queue().await;
    let (port, port_consumer) = (free_port(), free_port());
    let _mcp = spawn(env!("CARGO_BIN_EXE_local"), port, &redis_url, &prefix, queue_addr);
    let _consumer = spawn(env!("CARGO_BIN_EXE_process-job"), port_consumer, &redis_url, &prefix, queue_addr);
    // (receipt, the Retry-After of each 429 in turn, the delivery's status, the tries made)
    let attempts = vercel_mcp::jobs::queue::ACK_ATTEMPTS as usize;
    for (receipt, retry_afters, expected, tries) in [
        ("receipt-1", vec![Some("1")], 200, 2),
        ("receipt-2", vec![None], 500, 1),
        ("receipt-3", vec![Some("30")], 500, 1),
        // A queue that keeps saying "now" is tried a few times, not pressed for the whole allowance.
        ("receipt-4", vec![Some("0"); 10], 500, attempts),
    ] {
        call(port, "submit_job", json!({"steps": 1})).await;
        let message = queue.lock().unwrap().published.last().unwrap().2.clone();
        let throttles = retry_afters.len();
        {
            let mut queue = queue.lock().unwrap();
            queue.leased.push(receipt.to_owned());
            for retry_after in retry_afters {
                queue.throttled.push((receipt.to_owned(), retry_after));
            }
        }
        let (status, outcome) = deliver(port_consumer, &message, receipt).await;
        assert_eq!(status, expected, "{receipt}: {outcome}");
        let left = queue.lock().unwrap().throttled.iter().filter(|(r, _)| r == receipt).count();
        let acked_now = usize::from(expected == 200);
        assert_eq!(throttles - left + acked_now, tries, "{receipt}: the acknowledgements tried");
        queue.lock().unwrap().throttled.retain(|(r, _)| r != receipt);
        let acked = queue.lock().unwrap().acked.contains(&receipt.to_owned());
        assert_eq!(acked, expected == 200, "{receipt}: acknowledged only when the retry was made");
        if expected == 500 {
            assert!(outcome["error"].as_str().unwrap().contains("429"), "{outcome}");
            let again = format!("{receipt}-again");
            queue.lock().unwrap().leased.push(again.clone());
            let (status, outcome) = deliver(port_consumer, &message, &again).await;
            assert_eq!((status, outcome["state"].clone()), (200, json!("done")), "{outcome}");
            assert!(queue.lock().unwrap().acked.contains(&again));
        }
    }
}
