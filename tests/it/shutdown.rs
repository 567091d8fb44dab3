//! Stopping the local run (SIGTERM, Ctrl-C): it stops accepting, finishes the requests in flight,
//! ends listen streams with their result, lets task rounds finish or records them as failed,
//! saying why, and only then goes. Before, the runtime was dropped with all of it still running:
//! clients saw connections cut, and a task read as working for minutes after its instance died.

use crate::common;

use common::TestServer;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

use vercel_mcp::protocol::types::CallToolResult;
use vercel_mcp::security::Principal;
use vercel_mcp::server::{McpServer, NoArguments, ToolDef};
use vercel_mcp::state::SystemClock;
use vercel_mcp::tasks::{TaskStatus, TaskSupport};
use vercel_mcp::{App, Parts, local};

/// A slow call (it says when it has begun), a task round that ends when `release` is notified,
/// one that never does.
fn registry(config: &Parts, begun: Arc<Notify>, release: Arc<Notify>) -> McpServer {
    let mut server = McpServer::new("shutdown-test", "1");
    server.enable_tasks(config.task_service());
    server.tool(ToolDef::new("slow").description("Takes a moment"), move |_, _: NoArguments| {
        let begun = begun.clone();
        async move {
            begun.notify_one();
            tokio::time::sleep(Duration::from_millis(400)).await;
            CallToolResult::text("finished")
        }
    });
    server.tool(
        ToolDef::new("short_round").description("A round that ends soon").task_support(TaskSupport::Required),
        move |_, _: NoArguments| {
            let release = release.clone();
            async move {
                release.notified().await;
                CallToolResult::text("round done")
            }
        },
    );
    server.tool(
        ToolDef::new("endless_round").description("A round that never ends").task_support(TaskSupport::Required),
        |_, _: NoArguments| async {
            std::future::pending::<()>().await;
            CallToolResult::text("never")
        },
    );
    server
}

async fn create_task(server: &TestServer, tool: &str) -> String {
    let created = server.call_as_task(tool).send().await.json();
    created["result"]["taskId"].as_str().unwrap_or_else(|| panic!("a task: {created}")).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_finishes_what_is_in_flight_and_ends_what_would_not() {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let (begun, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let app = Arc::new(App::new(registry(&config, begun.clone(), release.clone()), config.endpoint()));
    let routes = local::Routes::with_mcp(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = tokio::spawn(local::serve_listener(routes.clone(), listener));
    let server = TestServer { addr };

    let short = create_task(&server, "short_round").await;
    let endless = create_task(&server, "endless_round").await;
    let listen = json!({"notifications": {"toolsListChanged": true}});
    let (status, _, mut stream) = server.modern(json!("L"), "subscriptions/listen", listen).open().await;
    assert_eq!(status, 200);
    common::read_events(&mut stream, 1).await;
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    let slow = tokio::spawn(async move { TestServer { addr }.call_tool("slow", json!({})).await });
    common::bounded("the slow call begins", begun.notified()).await;

    // What `local::serve` does on SIGTERM: the accept loop (and the listener) goes, then the drain.
    accepting.abort();
    let _ = accepting.await;
    let draining = tokio::spawn({
        let routes = routes.clone();
        async move { routes.drain().await }
    });
    // The short round ends only once the drain is under way: it ends within the grace.
    common::bounded("the drain begins", async {
        while !app.stopping().has_begun() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    release.notify_one();
    let drained = common::bounded("the drain", draining).await.unwrap();
    assert!(drained, "everything ended within the grace period");

    let slow = slow.await.unwrap();
    assert_eq!(slow["content"][0]["text"], "finished", "the call in flight was answered: {slow}");
    let events = common::read_until_answer(&mut stream).await;
    let result = events.last().unwrap();
    assert_eq!(
        (result["id"].clone(), result["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone()),
        (json!("L"), json!("L"))
    );
    let mut rest = Vec::new();
    common::bounded("the stream's connection closes", stream.read_to_end(&mut rest)).await.unwrap();
    let mut byte = [0u8; 1];
    let read = common::bounded("the idle connection closes", idle.read(&mut byte)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "an idle connection is closed, not kept: {read:?}");

    let owner = Principal::anonymous();
    let record = |id: String| {
        let store = config.task_store.clone();
        let owner = owner.id().to_owned();
        async move { store.get(&owner, &id).await.unwrap().expect("the task's record") }
    };
    let short = record(short).await;
    assert_eq!(short.status, TaskStatus::Completed, "a round that ends within the grace finishes: {short:?}");
    let endless = record(endless).await;
    assert_eq!(endless.status, TaskStatus::Failed, "{endless:?}");
    let said = serde_json::to_string(&endless).unwrap();
    assert!(said.contains("stopped before the work finished"), "the task says why: {said}");
}

/// The local run's binary, stopped with a real SIGTERM: an open listen stream gets its result
/// (not a cut connection), and the process exits by itself, successfully, within its stop limit.
#[tokio::test]
async fn sigterm_ends_a_listen_stream_with_its_result_and_the_process_exits() {
    let (mut process, server) = common::process::Launch::local().start();
    let listen = json!({"notifications": {"toolsListChanged": true}});
    let (status, _, mut stream) = server.modern(json!(9), "subscriptions/listen", listen).open().await;
    assert_eq!(status, 200);
    common::read_events(&mut stream, 1).await;

    process.signal("TERM");
    let events: Vec<Value> = common::read_until_answer(&mut stream).await;
    assert_eq!(events.last().unwrap()["id"], 9, "the stream ended with its result: {events:?}");
    // Within the stop's own limit (and a second for the process to go), not just eventually.
    let deadline = std::time::Instant::now() + local::STOP_WITHIN + Duration::from_secs(1);
    let exited = loop {
        if let Some(status) = process.exited() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the process did not exit within its stop limit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exited.success(), "{exited:?}");
}

/// A function executable under `vercel_runtime` (`api/mcp.rs`), stopped with a real SIGTERM after
/// serving a call, exits by itself and successfully rather than by the signal (the runtime stops
/// so): a profiling build (scripts/pgo.sh) writes what it counted only at such an exit.
#[tokio::test]
async fn sigterm_ends_a_function_with_a_normal_exit() {
    let (mut process, server) = common::process::Launch::binary(env!("CARGO_BIN_EXE_mcp"))
        .env("MCP_STATE_SECRET", "test=0123456789abcdef0123456789abcdef")
        .start();
    let discover = server.modern(json!(1), "server/discover", json!({})).send().await;
    assert_eq!(discover.status, 200);
    assert!(process.exited().is_none(), "the function serves until it is stopped");
    process.signal("TERM");
    let exited = common::bounded("the function to exit", async {
        loop {
            if let Some(status) = process.exited() {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(exited.success(), "a normal exit, not the signal's: {exited:?}");
}

/// A 2025-11-25 call waiting for its client's answer cannot get it once the process stops taking
/// requests (the answer is a request of its own): it ends at once with an error that says why,
/// rather than holding the drain until the grace runs out and being cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_call_waiting_for_its_client_ends_with_an_error_when_stopping() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = common::fixture_server(&calls, &Arc::new(Notify::new()));
    let config = Parts::for_tests(Arc::new(SystemClock));
    let routes = local::Routes::with_mcp(Arc::new(App::new(server, config.endpoint())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = tokio::spawn(local::serve_listener(routes.clone(), listener));
    let server = TestServer { addr };
    let session = server.legacy_session(json!({"elicitation": {}})).await;
    let call = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ask","arguments":{}}});
    let (status, _, mut stream) = server.legacy(call).header("Mcp-Session-Id", &session).open().await;
    assert_eq!(status, 200);
    let asked = common::read_events(&mut stream, 1).await;
    assert_eq!(asked[0]["method"], "elicitation/create");

    accepting.abort();
    let _ = accepting.await;
    assert!(common::bounded("the drain", routes.drain()).await, "the waiting call did not hold the drain");
    let events = common::read_until_answer(&mut stream).await;
    let answer = events.last().unwrap();
    assert_eq!(answer["id"], 9);
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("is stopping"), "{answer}");
}
