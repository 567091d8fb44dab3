//! The tasks extension across two instances sharing Redis: a task created on one instance is
//! read, answered and cancelled through the other; foreign principals and undeclared clients
//! are refused.

use crate::common;

use common::TestServer;
use common::redis::{redis, unique_prefix};
use serde_json::{Value, json};
use std::sync::Arc;

use vercel_mcp::protocol::types::{CallToolResult, InputRequest};
use vercel_mcp::server::{InputRequired, McpServer, NoArguments, Outcome, ToolDef};
use vercel_mcp::state::SystemClock;
use vercel_mcp::store::Redis;
use vercel_mcp::tasks::{RedisTaskStore, TaskSupport};
use vercel_mcp::{App, Parts};

fn registry(config: &Parts) -> McpServer {
    let mut server = McpServer::new("tasks-test", "1");
    server.enable_tasks(config.task_service());
    server.tool(
        ToolDef::new("ask_twice").description("Two questions, then a summary").task_support(TaskSupport::Required),
        |ctx, _: NoArguments| async move {
            let name =
                |key: &str| ctx.input_response(key).and_then(|r| r["content"]["name"].as_str()).map(str::to_owned);
            if let (Some(a), Some(b)) = (name("a"), name("b")) {
                return Outcome::Complete(CallToolResult::text(format!("{a} and {b}")));
            }
            let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
            let mut input = InputRequired::new();
            for key in ["a", "b"] {
                if name(key).is_none() {
                    input = input.request(
                        key,
                        InputRequest::ElicitForm { message: key.into(), requested_schema: schema.clone() },
                    );
                }
            }
            Outcome::InputRequired(input)
        },
    );
    server.tool(
        ToolDef::new("inline")
            .description("Done before a task is made")
            .task_support(TaskSupport::Optional)
            .input_before_task(),
        |_, _: NoArguments| async { CallToolResult::text("done inline") },
    );
    server.tool(
        ToolDef::new("forever").description("Runs until cancelled").task_support(TaskSupport::Optional),
        |_, _: NoArguments| async {
            std::future::pending::<()>().await;
            CallToolResult::text("never")
        },
    );
    server
}

async fn instance(redis_url: &str, prefix: &str) -> TestServer {
    instance_serving(redis_url, prefix, registry).await
}

/// An instance on the shared Redis that serves what `registry` registers.
async fn instance_serving(redis_url: &str, prefix: &str, registry: fn(&Parts) -> McpServer) -> TestServer {
    let mut config = Parts::for_tests(Arc::new(SystemClock));
    // Short enough that a notification that never comes fails the test soon, not in 280 s.
    config.settings.listen_max_duration = std::time::Duration::from_secs(20);
    let redis = Redis::connect(redis_url, prefix).unwrap();
    config.bus = vercel_mcp::state::RedisBus::new(&redis);
    config.task_store = Arc::new(RedisTaskStore::new(redis));
    TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await
}

use common::{meta, with_tasks};

async fn task_call(server: &TestServer, method: &str, params: Value) -> common::Reply {
    task_call_as(server, None, method, params).await
}

/// [`task_call`] with `Authorization: <bearer>` when one is given.
async fn task_call_as(server: &TestServer, bearer: Option<&str>, method: &str, mut params: Value) -> common::Reply {
    params["_meta"] = with_tasks();
    let mut call = server.modern(json!(1), method, params.clone());
    if let Some(task_id) = params["taskId"].as_str() {
        call = call.header("Mcp-Name", task_id);
    }
    if let Some(bearer) = bearer {
        call = call.header("Authorization", bearer);
    }
    call.send().await
}

async fn wait_for(server: &TestServer, task_id: &str, status: &str) -> Value {
    for _ in 0..5000 {
        let task = task_call(server, "tasks/get", json!({"taskId": task_id})).await.json()["result"].clone();
        if task["status"] == status {
            return task;
        }
        tokio::task::yield_now().await;
    }
    panic!("task {task_id} never reached {status}");
}

/// Creates an `ask_twice` task on `server` and waits until it asks for input: its id.
async fn parked_task(server: &TestServer) -> String {
    let created =
        task_call(server, "tools/call", json!({"name": "ask_twice", "arguments": {}})).await.json()["result"].clone();
    let task_id = created["taskId"].as_str().expect("a task").to_owned();
    wait_for(server, &task_id, "input_required").await;
    task_id
}

/// A listen stream (id `L`) on `server` for the changes of `task_id`, its acknowledgement and
/// the task's state as the stream opened read (the anonymous caller owns and sees its tasks).
async fn listening_to(server: &TestServer, task_id: &str) -> tokio::net::TcpStream {
    listening_to_as(server, None, task_id, true).await
}

/// [`listening_to`] with `Authorization: <bearer>` when one is given; the task's state is read
/// after the acknowledgement only when the caller `sees` the task (another caller's, or one of a
/// tool its token may not call, is not sent).
async fn listening_to_as(
    server: &TestServer,
    bearer: Option<&str>,
    task_id: &str,
    sees: bool,
) -> tokio::net::TcpStream {
    let mut listen = json!({"notifications": {"taskIds": [task_id]}});
    listen["_meta"] = with_tasks();
    let mut open = server.modern(json!("L"), "subscriptions/listen", listen);
    if let Some(bearer) = bearer {
        open = open.header("Authorization", bearer);
    }
    let (status, _, mut stream) = open.open().await;
    assert_eq!(status, 200, "the listen stream opens");
    let opened = common::read_events(&mut stream, 1 + usize::from(sees)).await;
    if sees {
        assert_eq!(
            (&opened[1]["method"], &opened[1]["params"]["taskId"]),
            (&json!("notifications/tasks"), &json!(task_id)),
            "the task's state as the stream opened: {opened:?}"
        );
    } else {
        // What came with the acknowledgement is read here, and the caller reads the rest.
        assert!(opened.iter().all(|e| e["method"] != "notifications/tasks"), "a stranger heard: {opened:?}");
    }
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_moves_between_instances() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("tasks");
    let (a, b) = (instance(&url, &prefix).await, instance(&url, &prefix).await);

    let created =
        task_call(&a, "tools/call", json!({"name": "ask_twice", "arguments": {}})).await.json()["result"].clone();
    assert_eq!(created["resultType"], "task");
    for absent in ["result", "error", "inputRequests", "requestState"] {
        assert!(created.get(absent).is_none(), "{absent} is not part of a CreateTaskResult");
    }
    let task_id = created["taskId"].as_str().unwrap().to_owned();
    let parked = wait_for(&b, &task_id, "input_required").await;
    assert_eq!(parked["inputRequests"].as_object().unwrap().len(), 2, "instance B sees A's task");

    // A listen stream on B hears about the task when A changes it.
    // An id of another shape than the server mints names no task: not honoured, never read.
    let mut listen = json!({"notifications": {"taskIds": [task_id, "someone-elses-task", "x".repeat(4000)]}});
    listen["_meta"] = with_tasks();
    let (_, _, mut stream) = b.modern(json!("L1"), "subscriptions/listen", listen).open().await;
    let ack = common::read_events(&mut stream, 1).await.remove(0);
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([task_id]));

    let ack = task_call(&a, "tasks/update", json!({"taskId": task_id, "inputResponses": {"a": {"action": "accept", "content": {"name": "Ada"}}, "zzz": {"ignored": true}}})).await;
    assert_eq!(ack.json()["result"]["resultType"], "complete");
    let partial = task_call(&a, "tasks/get", json!({"taskId": task_id})).await.json()["result"].clone();
    assert_eq!(partial["status"], "input_required");
    assert_eq!(
        partial["inputRequests"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["b"],
        "the answered key is gone at once"
    );
    task_call(
        &a,
        "tasks/update",
        json!({"taskId": task_id, "inputResponses": {"b": {"action": "accept", "content": {"name": "Grace"}}}}),
    )
    .await;
    let done = wait_for(&b, &task_id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada and Grace");
    // ... and the listener on B heard the status change A made: the task's full state, tagged
    // with the subscription.
    // Every change is announced (each answer, then `working`, then `completed`): read until the
    // completion, within a bound.
    let mut heard = Vec::new();
    let completed = loop {
        assert!(heard.len() < 8, "no completion among {heard:?}");
        heard.extend(common::read_events(&mut stream, 1).await);
        if let Some(completed) = heard.iter().find(|e| e["params"]["status"] == "completed") {
            break completed.clone();
        }
    };
    assert_eq!(completed["method"], "notifications/tasks", "{heard:?}");
    assert_eq!(completed["params"]["result"]["content"][0]["text"], "Ada and Grace");
    assert_eq!(completed["params"]["taskId"], task_id);
    assert_eq!(completed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1");
    assert!(done.get("requestState").is_none());

    let running =
        task_call(&a, "tools/call", json!({"name": "forever", "arguments": {}})).await.json()["result"]["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
    assert_eq!(
        task_call(&b, "tasks/cancel", json!({"taskId": running})).await.json()["result"]["resultType"],
        "complete"
    );
    assert_eq!(task_call(&a, "tasks/get", json!({"taskId": running})).await.json()["result"]["status"], "cancelled");
    let mut again = task_call(&a, "tasks/cancel", json!({"taskId": task_id})).await.json();
    again["result"].as_object_mut().expect("a result").remove("_meta");
    assert_eq!(again["result"], json!({"resultType": "complete"}), "cancelling a finished task is a bare ack: {again}");
    assert_eq!(task_call(&b, "tasks/get", json!({"taskId": task_id})).await.json()["result"]["status"], "completed");
}

/// A task whose round needs input its creating request did not declare it could give fails with
/// -32021, and says why in its `statusMessage` (which the extension says a failed task should
/// carry).
#[tokio::test]
async fn a_task_failed_for_an_undeclared_capability_says_why() {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let mut params = json!({"name": "ask_twice", "arguments": {}});
    params["_meta"] = meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
    let created = server.modern(json!(1), "tools/call", params).send().await.json();
    let task_id = created["result"]["taskId"].as_str().unwrap_or_else(|| panic!("a task: {created}")).to_owned();
    let failed = wait_for(&server, &task_id, "failed").await;
    assert_eq!(failed["error"]["code"], -32021, "{failed}");
    assert!(failed["statusMessage"].as_str().is_some_and(|m| m.contains("did not declare")), "{failed}");
}

/// An answer in `tasks/update` is an object (the result of the request it answers), as in an MRTR
/// retry: anything else is -32602 and records nothing; before, the task resumed on it.
#[tokio::test]
async fn a_task_update_whose_answer_is_not_an_object_is_refused() {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let task_id = parked_task(&server).await;
    let update = json!({"taskId": task_id, "inputResponses": {"a": 5, "b": "yes"}});
    let reply = task_call(&server, "tasks/update", update).await.json();
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let task = wait_for(&server, &task_id, "input_required").await;
    assert_eq!(task["inputRequests"].as_object().unwrap().len(), 2, "nothing was recorded: {task}");
}

/// A task whose tool a deploy removed while it waited for input fails when its last request is
/// answered, naming the tool; before, the answer set it working, nothing ran it, and it read as
/// working until it expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_tool_is_gone_fails_when_answered() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("tasks-gone");
    let before = instance(&url, &prefix).await;
    let after = instance_serving(&url, &prefix, |config| {
        let mut server = McpServer::new("tasks-test", "2");
        server.enable_tasks(config.task_service());
        server
    })
    .await;
    let task_id = parked_task(&before).await;
    let answers = json!({"a": {"action": "accept", "content": {"name": "Ada"}}, "b": {"action": "accept", "content": {"name": "Bo"}}});
    let ack = task_call(&after, "tasks/update", json!({"taskId": task_id, "inputResponses": answers})).await;
    assert_eq!(ack.status, 200, "{}", ack.text());
    let failed = wait_for(&after, &task_id, "failed").await;
    assert_eq!(failed["error"]["code"], -32602, "{failed}");
    assert!(failed["error"]["message"].as_str().unwrap().contains("ask_twice"), "{failed}");
}

/// A round that hands back only its state (asking for nothing) runs on at once with that
/// state, as a synchronous call's client would retry; one that never moves on fails, saying so.
/// Before, such a task read `input_required` with nothing to answer until its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_round_that_asks_for_nothing_runs_on_with_its_state() {
    let Some((url, _guard)) = redis() else { return };
    let server = instance_serving(&url, &unique_prefix("tasks-state-only"), |config| {
        let mut server = McpServer::new("tasks-test", "1");
        server.enable_tasks(config.task_service());
        server.tool(
            ToolDef::new("shed_twice")
                .description("Sheds load twice, then answers")
                .task_support(TaskSupport::Required),
            |ctx, _: NoArguments| async move {
                let round = ctx.request_state().and_then(|s| s["round"].as_u64()).unwrap_or(0);
                if round < 2 {
                    return Outcome::InputRequired(InputRequired::new().state(json!({"round": round + 1})));
                }
                Outcome::Complete(CallToolResult::text(format!("answered in round {round}")))
            },
        );
        server.tool(
            ToolDef::new("sheds_forever").description("Never moves on").task_support(TaskSupport::Required),
            |_, _: NoArguments| async { Outcome::InputRequired(InputRequired::new().state(json!({"again": true}))) },
        );
        server
    })
    .await;
    let create = |name: &str| {
        let params = json!({"name": name, "arguments": {}});
        async { task_call(&server, "tools/call", params).await.json()["result"]["taskId"].as_str().unwrap().to_owned() }
    };
    let task_id = create("shed_twice").await;
    let done = wait_for(&server, &task_id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "answered in round 2", "{done}");
    let task_id = create("sheds_forever").await;
    let failed = wait_for(&server, &task_id, "failed").await;
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert!(failed["error"]["message"].as_str().unwrap().contains("asking for nothing"), "{failed}");
}

#[tokio::test]
async fn undeclared_clients_unknown_ids_and_removed_methods() {
    let Some((url, _guard)) = redis() else { return };
    let server = instance(&url, &unique_prefix("tasks-neg")).await;
    let mut plain = json!({"name": "ask_twice", "arguments": {}});
    plain["_meta"] = meta(json!({"elicitation": {}}));
    let refused = server.modern(json!(1), "tools/call", plain).send().await;
    assert_eq!((refused.status, refused.code()), (400, -32021));
    assert_eq!(
        refused.json()["error"]["data"]["requiredCapabilities"],
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
    let mut get = json!({"taskId": "nope"});
    get["_meta"] = meta(json!({}));
    assert_eq!(server.modern(json!(1), "tasks/get", get).header("Mcp-Name", "nope").send().await.code(), -32021);
    assert_eq!(task_call(&server, "tasks/get", json!({"taskId": "AAAAAAAAAAAAAAAAAAAAAA"})).await.code(), -32602);
    for removed in ["tasks/result", "tasks/list"] {
        let mut params = json!({"taskId": "x"});
        params["_meta"] = with_tasks();
        assert_eq!(server.modern(json!(1), removed, params).send().await.code(), -32601, "{removed}");
    }
    // `forever` is optional: with the extension declared it becomes a task.
    let created =
        task_call(&server, "tools/call", json!({"name": "forever", "arguments": {}})).await.json()["result"].clone();
    assert_eq!(created["resultType"], "task");
    let discover = server.modern(json!(1), "server/discover", json!({})).send().await.json();
    assert_eq!(discover["result"]["capabilities"]["extensions"], json!({"io.modelcontextprotocol/tasks": {}}));
    assert!(discover["result"]["capabilities"].get("tasks").is_none());
}

/// A task store that cannot be reached: creating a task, or reading one, is a `-32603` whose
/// correlation id a `task.fault` log line carries with the detail, and the caller's text names no
/// address.
#[tokio::test]
async fn a_task_store_outage_is_an_internal_error_with_a_correlation_id() {
    let logs = Arc::new(vercel_mcp::observe::MemorySink::default());
    let mut config = Parts::for_tests(Arc::new(SystemClock));
    config.log_sink = logs.clone();
    config.task_store = Arc::new(RedisTaskStore::new(Redis::connect("redis://127.0.0.1:1", "down").unwrap()));
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    for (method, params, operation) in [
        ("tools/call", json!({"name": "ask_twice", "arguments": {}}), "create"),
        ("tasks/get", json!({"taskId": "0123456789abcdef-_ABCD"}), "get"),
    ] {
        let reply = task_call(&server, method, params).await.json();
        assert_eq!(reply["error"]["code"], -32603, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(!message.contains("127.0.0.1"), "no address in the caller's text: {message}");
        common::assert_fault_logged(message, &logs, "task.fault", operation);
    }
    // An id of a shape the server never mints is not looked up: not found, with the store down.
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let reply = task_call(&server, method, json!({"taskId": "x".repeat(10_000), "inputResponses": {}})).await;
        assert_eq!(reply.code(), -32602, "{method}: {}", reply.text());
    }
}

/// A task belongs to its creator: another principal can neither read nor cancel it (both answer
/// exactly as for an unknown id, and the task runs on), and its listen stream, though it names the
/// task, hears nothing of it, while the creator's own stream hears the cancel.
#[tokio::test]
async fn a_foreign_principal_can_neither_see_nor_touch_a_task() {
    use common::tokens::{auth_config, bearer, stub_jwks};
    let (jwks, _) = stub_jwks().await;
    let mut config = auth_config(jwks, &[("MCP_AUTH_MODE", "required")]);
    config.settings.listen_max_duration = std::time::Duration::from_secs(2);
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let (alice, bob) = (bearer("alice", "mcp:read"), bearer("bob", "mcp:read"));
    let as_caller = |who: &str, method: &str, mut params: Value| {
        params["_meta"] = with_tasks();
        let mut call = server.modern(json!(1), method, params.clone()).header("Authorization", who);
        if let Some(task_id) = params["taskId"].as_str() {
            call = call.header("Mcp-Name", task_id);
        }
        call.send()
    };
    let created = as_caller(&alice, "tools/call", json!({"name": "forever", "arguments": {}})).await.json();
    let task_id = created["result"]["taskId"].as_str().expect("a task").to_owned();

    let mut listen = json!({"notifications": {"taskIds": [task_id]}});
    listen["_meta"] = with_tasks();
    let (_, _, mut bobs_stream) =
        server.modern(json!("B"), "subscriptions/listen", listen.clone()).header("Authorization", &bob).open().await;
    let bob_opened = common::read_events(&mut bobs_stream, 1).await;
    assert!(bob_opened.iter().all(|e| e["method"] != "notifications/tasks"), "bob heard: {bob_opened:?}");
    let (_, _, mut alices_stream) =
        server.modern(json!("A"), "subscriptions/listen", listen).header("Authorization", &alice).open().await;
    let opened = common::read_events(&mut alices_stream, 2).await;
    assert_eq!(opened[1]["params"]["status"], "working", "her task's state as her stream opened: {opened:?}");

    for method in ["tasks/get", "tasks/cancel"] {
        let foreign = as_caller(&bob, method, json!({"taskId": task_id})).await.json();
        assert_eq!(foreign["error"]["code"], -32602, "{method} by another principal is refused: {foreign}");
        let unknown = as_caller(&bob, method, json!({"taskId": "no-such-task"})).await.json();
        assert_eq!(foreign["error"], unknown["error"], "indistinguishable from an unknown id");
    }
    let mine = as_caller(&alice, "tasks/get", json!({"taskId": task_id})).await.json();
    assert_eq!(mine["result"]["status"], "working", "bob's attempts changed nothing: {mine}");
    as_caller(&alice, "tasks/cancel", json!({"taskId": task_id})).await;
    // The cancel is announced: alice's stream hears it (while bob's is still open) ...
    let heard = common::read_events(&mut alices_stream, 1).await.remove(0);
    assert_eq!(
        (&heard["method"], &heard["params"]["taskId"]),
        (&json!("notifications/tasks"), &json!(task_id)),
        "{heard}"
    );
    assert_eq!(heard["params"]["status"], "cancelled");
    // ... and bob's stream ends after its short lifetime; nothing about alice's task was on it.
    let events = common::read_until_answer(&mut bobs_stream).await;
    assert!(events.iter().all(|e| e["method"] != "notifications/tasks"), "bob heard: {events:?}");
}

/// An instance whose link to Redis pub/sub broke misses what other instances change meanwhile;
/// once it is subscribed again, its listen streams are caught up: here, the final state of a
/// task that finished on the other instance while the link was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_is_caught_up_after_the_bus_reconnects() {
    let Some(private) = common::redis::private_redis() else { return };
    let url = private.url();
    let prefix = unique_prefix("bus-gap");
    let (a, b) = (instance(&url, &prefix).await, instance(&url, &prefix).await);
    let task_id = parked_task(&a).await;
    let mut stream = listening_to(&b, &task_id).await;
    // A listens too, so that its subscription is made now, not whenever one of its task rounds
    // first waits on the bus for a cancel (which might be after the links are cut below).
    let _a_listens = listening_to(&a, &task_id).await;

    let redis = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let subscribers = || {
        let mut redis = redis.clone();
        let channel = format!("{prefix}:changes");
        async move {
            let counts: Vec<(String, i64)> =
                redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut redis).await.unwrap();
            counts[0].1
        }
    };
    assert_eq!(subscribers().await, 2, "both instances listen");
    let _: i64 =
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut redis.clone()).await.unwrap();
    assert_eq!(subscribers().await, 0, "the links are down, B's among them");
    let answers = json!({"a": {"action": "accept", "content": {"name": "Ada"}}, "b": {"action": "accept", "content": {"name": "Grace"}}});
    task_call(&a, "tasks/update", json!({"taskId": task_id, "inputResponses": answers})).await;
    wait_for(&a, &task_id, "completed").await;
    assert_eq!(subscribers().await, 0, "the change was published while B was not subscribed");

    // B subscribes again (after half a second) and catches the stream up.
    let mut heard: Vec<Value> = Vec::new();
    while heard.last().is_none_or(|e| e["params"]["status"] != "completed") {
        for event in common::read_events(&mut stream, 1).await {
            assert_eq!(event["method"], "notifications/tasks", "before the stream's end: {event}");
            heard.push(event);
        }
    }
    assert_eq!(heard.last().unwrap()["params"]["taskId"], task_id);
}

/// A TCP proxy to `target` whose connections so far can be frozen: they stay open and carry
/// nothing, as a link that died without a word does (a NAT that forgot an idle connection).
/// Connections made after a freeze are carried as usual.
async fn freezing_proxy(target: String) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let freezes = Arc::new(AtomicU64::new(0));
    let counted = freezes.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(&target).await else { continue };
            let born = counted.load(Ordering::SeqCst);
            let ((client_in, client_out), (upstream_in, upstream_out)) = (client.into_split(), upstream.into_split());
            for (mut from, mut to, freezes) in [
                (
                    Box::new(client_in) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                    Box::new(upstream_out) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                    counted.clone(),
                ),
                (Box::new(upstream_in), Box::new(client_out), counted.clone()),
            ] {
                tokio::spawn(async move {
                    let mut chunk = vec![0u8; 16 * 1024];
                    while let Ok(n @ 1..) = from.read(&mut chunk).await {
                        if freezes.load(Ordering::SeqCst) > born {
                            // Frozen: hold both ends open and carry nothing more.
                            std::future::pending::<()>().await;
                        }
                        if to.write_all(&chunk[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    (addr, freezes)
}

/// A subscription whose link to Redis died without a word (nothing closed, nothing carried) is
/// noticed by its periodic check and made again, counted as a loss so listeners catch up, and
/// changes reach it again. Before, the instance's listeners heard nothing for as long as it lived.
#[tokio::test]
async fn a_silently_dead_subscription_is_noticed_and_made_again() {
    use std::time::Duration;
    use vercel_mcp::state::{ChangeBus, ChangeEvent, RedisBus};
    let Some(private) = common::redis::private_redis() else { return };
    let (proxy, freezes) = freezing_proxy(format!("127.0.0.1:{}", private.port)).await;
    let prefix = unique_prefix("bus-dead");
    let through_proxy = Redis::connect(&format!("redis://{proxy}"), &prefix).unwrap();
    // Checked often, with room for a slow answer on a loaded machine.
    let check = Duration::from_millis(200);
    let subscriber = RedisBus::checking_link(&through_proxy, check, Duration::from_secs(1));
    let mut heard = subscriber.subscribe();
    subscriber.ready().await;
    let mut losses = subscriber.losses().unwrap();
    losses.borrow_and_update();
    let publisher = RedisBus::new(&Redis::connect(&private.url(), &prefix).unwrap());
    // A link that answers its checks is kept: five checks, no new subscription.
    tokio::time::sleep(check * 5).await;
    assert!(!losses.has_changed().unwrap(), "a live link was given up");

    freezes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    common::bounded("a new subscription", losses.changed()).await.unwrap();
    subscriber.ready().await;
    // Published until heard: the new subscription may be a moment from taking it.
    let received = common::bounded("the change", async {
        loop {
            publisher.publish(ChangeEvent::ResourcesListChanged);
            if let Ok(Ok(event)) = tokio::time::timeout(Duration::from_millis(100), heard.recv()).await {
                return event;
            }
        }
    })
    .await;
    assert_eq!(received, ChangeEvent::ResourcesListChanged);
}

/// Two deployments told apart by their Redis database alone (preview and production on one
/// server) do not hear each other's changes: pub/sub ignores the database, so its number is in
/// the channel's name. Two instances of one deployment (the same database) still do.
#[tokio::test]
async fn deployments_in_different_databases_do_not_hear_each_other() {
    use std::time::Duration;
    use vercel_mcp::state::{ChangeBus, ChangeEvent, RedisBus};
    let Some((url, _private)) = common::redis::redis() else { return };
    let prefix = unique_prefix("bus-db");
    let in_db = |db: u32| {
        let mut url = url::Url::parse(&url).unwrap();
        url.set_path(&db.to_string());
        RedisBus::new(&Redis::connect(url.as_str(), &prefix).unwrap())
    };
    let (preview, production, production_too) = (in_db(1), in_db(2), in_db(2));
    let mut preview_heard = preview.subscribe();
    let mut production_heard = production.subscribe();
    preview.ready().await;
    production.ready().await;
    let event = ChangeEvent::ResourceUpdated("test://shared".into());
    // Published until production hears it: its subscription may be a moment from taking it.
    common::bounded("production hears its own deployment", async {
        loop {
            production_too.publish(event.clone());
            if let Ok(Ok(heard)) = tokio::time::timeout(Duration::from_millis(100), production_heard.recv()).await {
                return assert_eq!(heard, event);
            }
        }
    })
    .await;
    // By now the change went out several times; none of it reached the other database's bus.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let silence = preview_heard.try_recv();
    assert!(matches!(silence, Err(tokio::sync::broadcast::error::TryRecvError::Empty)), "preview heard: {silence:?}");
    // And preview's subscription was alive all along: another preview instance is heard.
    let preview_too = in_db(1);
    let ours = ChangeEvent::ResourceUpdated("test://preview".into());
    common::bounded("preview hears its own deployment", async {
        loop {
            preview_too.publish(ours.clone());
            if let Ok(Ok(heard)) = tokio::time::timeout(Duration::from_millis(100), preview_heard.recv()).await {
                return assert_eq!(heard, ours, "the first thing preview hears is its own");
            }
        }
    })
    .await;
}

/// A change the bus cannot publish (its link to Redis is down) is tried again for a while, then
/// counted as a loss, so this instance's listeners catch up on what it would have told them;
/// before, it was dropped and they waited. One that is published reaches another instance's
/// subscriber and is no loss.
#[tokio::test]
async fn a_change_that_cannot_be_published_counts_as_a_loss() {
    use vercel_mcp::state::{ChangeBus, ChangeEvent, RedisBus};
    let down = RedisBus::new(&Redis::connect("redis://127.0.0.1:1", "down").unwrap());
    let mut losses = down.losses().expect("a shared bus counts its losses");
    losses.borrow_and_update();
    down.publish(ChangeEvent::ToolsListChanged);
    common::bounded("the loss", losses.changed()).await.unwrap();

    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("bus");
    let publisher = RedisBus::new(&Redis::connect(&url, &prefix).unwrap());
    let subscriber = RedisBus::new(&Redis::connect(&url, &prefix).unwrap());
    let mut heard = subscriber.subscribe();
    subscriber.ready().await;
    let mut lost = publisher.losses().unwrap();
    lost.borrow_and_update();
    publisher.publish(ChangeEvent::PromptsListChanged);
    assert_eq!(common::bounded("the change", heard.recv()).await.unwrap(), ChangeEvent::PromptsListChanged);
    assert!(!lost.has_changed().unwrap(), "a change that was published is no loss");
}

/// A task store whose reads fail while `failing` is set, counting the reads it failed.
#[derive(Default)]
struct Flaky {
    inner: vercel_mcp::tasks::MemoryTaskStore,
    failing: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicUsize,
}

impl vercel_mcp::tasks::TaskStore for Flaky {
    fn create<'a>(
        &'a self,
        record: &'a vercel_mcp::tasks::TaskRecord,
        quota: vercel_mcp::tasks::TaskQuota,
    ) -> vercel_mcp::store::StoreFuture<'a, Result<(), vercel_mcp::tasks::TaskRefused>> {
        self.inner.create(record, quota)
    }
    fn get<'a>(
        &'a self,
        owner: &'a str,
        task_id: &'a str,
    ) -> vercel_mcp::store::StoreFuture<'a, Option<vercel_mcp::tasks::TaskRecord>> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.failing.load(SeqCst) {
            self.failed.fetch_add(1, SeqCst);
            return Box::pin(async { Err(vercel_mcp::store::StoreError::fault("task store unavailable: reset")) });
        }
        self.inner.get(owner, task_id)
    }
    fn replace<'a>(&'a self, record: &'a vercel_mcp::tasks::TaskRecord) -> vercel_mcp::store::StoreFuture<'a, bool> {
        self.inner.replace(record)
    }
}

/// A task a listen stream could not read when it heard of its change (the store failed) is read
/// again a second later: the change is not lost to a store blip.
#[tokio::test]
async fn a_task_the_stream_could_not_read_is_read_again() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut config = Parts::for_tests(Arc::new(SystemClock));
    config.settings.listen_max_duration = std::time::Duration::from_secs(10);
    let store = Arc::new(Flaky::default());
    config.task_store = store.clone();
    let bus = config.bus.clone();
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let task_id = parked_task(&server).await;
    let mut stream = listening_to(&server, &task_id).await;

    store.failing.store(true, SeqCst);
    let owner = vercel_mcp::security::Principal::anonymous().id().to_owned();
    // The task changes (its status message), and the change is announced while reads fail.
    use vercel_mcp::tasks::TaskStore;
    let mut changed = store.inner.get(&owner, &task_id).await.unwrap().unwrap();
    changed.version += 1;
    changed.status_message = Some("still waiting".into());
    assert!(store.inner.replace(&changed).await.unwrap());
    bus.publish(vercel_mcp::state::ChangeEvent::TaskChanged { owner, task_id: task_id.clone() });
    for _ in 0..10_000 {
        if store.failed.load(SeqCst) > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(store.failed.load(SeqCst), 1, "the stream tried to read the task, and could not");
    store.failing.store(false, SeqCst);
    let heard = common::read_events(&mut stream, 1).await;
    assert_eq!(heard[0]["method"], "notifications/tasks", "read again, before the stream's end: {heard:?}");
    assert_eq!(
        (&heard[0]["params"]["taskId"], &heard[0]["params"]["status"], &heard[0]["params"]["statusMessage"]),
        (&json!(task_id), &json!("input_required"), &json!("still waiting")),
        "the change, read again"
    );
}

/// Each caller may have only its share of tasks running on an instance: past it, a task-creating
/// call is answered 429 with an error that says so, and other callers are unaffected.
#[tokio::test]
async fn a_caller_past_its_running_task_cap_gets_429() {
    use common::tokens::{auth_config, bearer, stub_jwks};
    let (jwks, _) = stub_jwks().await;
    let config = auth_config(jwks, &[("MCP_AUTH_MODE", "required"), ("MCP_TASKS_MAX_PER_PRINCIPAL", "1")]);
    assert_eq!(config.settings.task_caps.per_principal, 1, "read from the environment");
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let call = || {
        let mut call = json!({"name": "forever", "arguments": {}});
        call["_meta"] = with_tasks();
        call
    };
    let (alice, bob) = (bearer("alice", "mcp:read"), bearer("bob", "mcp:read"));
    let first = server.modern(json!(1), "tools/call", call()).header("Authorization", &alice).send().await;
    assert_eq!(first.json()["result"]["resultType"], "task");
    let refused = server.modern(json!(2), "tools/call", call()).header("Authorization", &alice).send().await;
    assert_eq!((refused.status, refused.code()), (429, -32600));
    let message = refused.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("too many tasks running (limit 1)"), "{message}");
    let other = server.modern(json!(3), "tools/call", call()).header("Authorization", &bob).send().await;
    assert_eq!(other.json()["result"]["resultType"], "task", "another caller has its own share");
}

/// The task caps hold per instance: two endpoints of one process (each with its own task
/// service, made from the same parts) count a caller's running tasks together, and freeing one
/// on either endpoint frees it for both.
#[tokio::test]
async fn task_caps_count_every_endpoint_of_the_process() {
    let mut config = Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    config.settings.task_caps = vercel_mcp::security::SlotCaps { per_principal: 1, total: 10 };
    let first = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let second = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let forever = || json!({"name": "forever", "arguments": {}});
    let running = task_call(&first, "tools/call", forever()).await.json();
    assert_eq!(running["result"]["resultType"], "task", "{running}");
    let refused = task_call(&second, "tools/call", forever()).await;
    assert_eq!((refused.status, refused.code()), (429, -32600), "{}", refused.text());
    assert!(refused.text().contains("too many tasks running (limit 1)"), "{}", refused.text());
    let task_id = running["result"]["taskId"].as_str().unwrap();
    let cancelled = task_call(&first, "tasks/cancel", json!({"taskId": task_id})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());
    wait_for(&first, task_id, "cancelled").await;
    // The cancelled run ends at its next look at its record (every 100 ms), and gives its slot back.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let admitted = loop {
        let attempt = task_call(&second, "tools/call", forever()).await;
        if attempt.status != 429 || tokio::time::Instant::now() > deadline {
            break attempt;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(admitted.json()["result"]["resultType"], "task", "the slot is free for the other endpoint");
}

/// Each endpoint is its own protected resource (its own audience and scopes): a task made on
/// one endpoint of a process is unknown on another, to the same caller, for every task method,
/// and an update or cancel there changes nothing; on its own endpoint it is found as usual.
#[tokio::test]
async fn a_task_is_seen_only_on_the_endpoint_that_made_it() {
    let config = Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let main = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let mut elsewhere = registry(&config);
    elsewhere.enable_tasks(config.services_at("/api/examples/elsewhere").tasks.clone());
    let elsewhere = TestServer::start(Arc::new(App::new(elsewhere, config.endpoint()))).await;

    let asked = task_call(&main, "tools/call", json!({"name": "ask_twice", "arguments": {}})).await.json();
    let task_id = asked["result"]["taskId"].as_str().expect("a task").to_owned();
    wait_for(&main, &task_id, "input_required").await;
    let answers = json!({"a": {"action": "accept", "content": {"name": "Ada"}}});
    for (method, params) in [
        ("tasks/get", json!({"taskId": task_id})),
        ("tasks/update", json!({"taskId": task_id, "inputResponses": answers})),
        ("tasks/cancel", json!({"taskId": task_id})),
    ] {
        let reply = task_call(&elsewhere, method, params).await;
        assert_eq!(reply.code(), -32602, "{method} on another endpoint: {}", reply.text());
        assert!(
            reply.text().contains("not found") || reply.text().contains("Task not found"),
            "{method}: {}",
            reply.text()
        );
    }
    let unchanged = wait_for(&main, &task_id, "input_required").await;
    assert!(unchanged["inputRequests"].get("a").is_some(), "the answer given elsewhere was not recorded: {unchanged}");
    // The same task, made on the other endpoint, is that endpoint's alone.
    let theirs = task_call(&elsewhere, "tools/call", json!({"name": "ask_twice", "arguments": {}})).await.json();
    let theirs = theirs["result"]["taskId"].as_str().expect("a task").to_owned();
    wait_for(&elsewhere, &theirs, "input_required").await;
    assert_eq!(task_call(&main, "tasks/get", json!({"taskId": theirs})).await.code(), -32602);
}

/// A tool that finishes inline before its task is made (`input_before_task`) has run by the time
/// the caller's task quota is checked: past it, the caller gets the result itself rather than a
/// 429 that would throw it away (and make a retry run the tool again).
#[tokio::test]
async fn past_the_task_quota_a_result_made_inline_is_answered_as_it_is() {
    let config = Parts::from_lookup(
        |name| (name == "MCP_TASK_SHARE").then(|| "1".to_owned()),
        Arc::new(vercel_mcp::state::ManualClock::new(1_000_000)),
    )
    .unwrap();
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let first = task_call(&server, "tools/call", json!({"name": "inline", "arguments": {}})).await.json();
    assert_eq!(first["result"]["resultType"], "task", "within the quota: recorded as a finished task");
    let task_id = first["result"]["taskId"].as_str().unwrap();
    assert_eq!(wait_for(&server, task_id, "completed").await["result"]["content"][0]["text"], "done inline");
    let second = task_call(&server, "tools/call", json!({"name": "inline", "arguments": {}})).await;
    assert_eq!(second.status, 200, "{}", second.text());
    assert_eq!(second.json()["result"]["resultType"], "complete");
    assert_eq!(second.json()["result"]["content"][0]["text"], "done inline");
    let third = task_call(&server, "tools/call", json!({"name": "forever", "arguments": {}})).await;
    assert_eq!(third.status, 429, "work not yet done is still refused: {}", third.text());
}

/// A listen stream hears of a task only if its token may call the task's tool, as tasks/get
/// answers: the owner's stream without the tool's scope hears nothing of it, the one with it
/// hears the cancel.
#[tokio::test]
async fn a_stream_without_the_tools_scope_hears_nothing_of_its_task() {
    use common::tokens::{auth_config, bearer, stub_jwks};
    let (jwks, _) = stub_jwks().await;
    let mut config = auth_config(jwks, &[("MCP_AUTH_MODE", "required")]);
    config.settings.listen_max_duration = std::time::Duration::from_secs(2);
    let mut registry = McpServer::new("tasks-test", "1");
    registry.enable_tasks(config.task_service());
    registry.tool(
        ToolDef::new("write_forever")
            .description("Writes until cancelled")
            .scopes(&["mcp:write"])
            .task_support(TaskSupport::Required),
        |_, _: NoArguments| async {
            std::future::pending::<()>().await;
            CallToolResult::text("never")
        },
    );
    let server = TestServer::start(Arc::new(App::new(registry, config.endpoint()))).await;
    let (writer, reader) = (bearer("alice", "mcp:read mcp:write"), bearer("alice", "mcp:read"));
    let call = json!({"name": "write_forever", "arguments": {}});
    let created = task_call_as(&server, Some(&writer), "tools/call", call).await.json();
    let task_id = created["result"]["taskId"].as_str().expect("a task").to_owned();
    let mut streams = Vec::new();
    for (who, sees) in [(&writer, true), (&reader, false)] {
        streams.push(listening_to_as(&server, Some(who), &task_id, sees).await);
    }
    let cancelled = task_call_as(&server, Some(&writer), "tasks/cancel", json!({"taskId": task_id})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());
    let heard = common::read_events(&mut streams[0], 1).await.remove(0);
    assert_eq!((&heard["method"], &heard["params"]["status"]), (&json!("notifications/tasks"), &json!("cancelled")));
    assert_eq!(heard["params"]["taskId"], json!(task_id));
    let events = common::read_until_answer(&mut streams[1]).await;
    assert!(events.iter().all(|e| e["method"] != "notifications/tasks"), "the read-only stream heard: {events:?}");
}

/// A listen stream that fell behind the change bus reads each task it names again, as its own
/// caller reads it, and sends what changed (a change whose announcement it missed): its owner's
/// stream gets it once; another caller's stream gets nothing of it.
#[tokio::test]
async fn a_stream_that_fell_behind_is_caught_up_on_its_own_tasks_only() {
    use common::tokens::{auth_config, bearer, stub_jwks};
    let (jwks, _) = stub_jwks().await;
    let mut config = auth_config(jwks, &[("MCP_AUTH_MODE", "required")]);
    config.settings.listen_max_duration = std::time::Duration::from_millis(300);
    let (bus, store) = (config.bus.clone(), config.task_store.clone());
    let server = TestServer::start(Arc::new(App::new(registry(&config), config.endpoint()))).await;
    let (alice, bob) = (bearer("alice", "mcp:read"), bearer("bob", "mcp:read"));
    let call = json!({"name": "forever", "arguments": {}});
    let created = task_call_as(&server, Some(&alice), "tools/call", call).await.json();
    let task_id = created["result"]["taskId"].as_str().expect("a task").to_owned();
    let mut streams = Vec::new();
    for (who, sees) in [(&alice, true), (&bob, false)] {
        streams.push(listening_to_as(&server, Some(who), &task_id, sees).await);
    }
    // Her task changes with nothing announced (the announcement is among what the streams
    // miss), and then the bus runs ahead of both streams. One runtime thread: neither stream
    // reads while these are published.
    let owner = vercel_mcp::security::Principal::verified(Some("alice"), None, Vec::new()).id().to_owned();
    let mut changed = store.get(&owner, &task_id).await.unwrap().expect("her task, under her id");
    changed.version += 1;
    changed.status_message = Some("changed quietly".into());
    assert!(store.replace(&changed).await.unwrap());
    for _ in 0..300 {
        bus.publish(vercel_mcp::state::ChangeEvent::ResourceUpdated("elsewhere://x".into()));
    }
    // The catch-up reads her task again and sends what changed, once; then the stream closes.
    let alices = common::read_until_answer(&mut streams[0]).await;
    assert_eq!(alices.len(), 2, "the change, then the graceful close: {alices:?}");
    assert_eq!(
        (&alices[0]["method"], &alices[0]["params"]["statusMessage"]),
        (&json!("notifications/tasks"), &json!("changed quietly"))
    );
    assert_eq!(alices[1]["id"], "L");
    let bobs = common::read_events(&mut streams[1], 1).await;
    assert_eq!(bobs[0]["id"], "L", "nothing of alice's task: {bobs:?}");
}

/// Cancelling a running task stops its work: the handler's future is dropped, not left running
/// with its result discarded.
#[tokio::test]
async fn cancelling_a_task_drops_its_running_handler() {
    struct Dropped(Arc<tokio::sync::Notify>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.notify_one();
        }
    }
    let config = Parts::for_tests(Arc::new(SystemClock));
    let (started, stopped) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let mut server = McpServer::new("tasks-test", "1");
    server.enable_tasks(config.task_service());
    let (on_start, on_stop) = (started.clone(), stopped.clone());
    server.tool(
        ToolDef::new("long").description("Works until cancelled").task_support(TaskSupport::Required),
        move |_, _: NoArguments| {
            let (on_start, guard) = (on_start.clone(), Dropped(on_stop.clone()));
            async move {
                let _guard = guard;
                on_start.notify_one();
                std::future::pending::<()>().await;
                CallToolResult::text("never")
            }
        },
    );
    let server = TestServer::start(Arc::new(App::new(server, config.endpoint()))).await;
    let created = task_call(&server, "tools/call", json!({"name": "long", "arguments": {}})).await.json();
    let task_id = created["result"]["taskId"].as_str().expect("a task").to_owned();
    common::bounded("the task to start", started.notified()).await;
    let stop = stopped.notified();
    task_call(&server, "tasks/cancel", json!({"taskId": task_id})).await;
    common::bounded("the cancelled task's handler to be dropped", stop).await;
    assert_eq!(wait_for(&server, &task_id, "cancelled").await["status"], "cancelled");
}

/// A stream naming many tasks, on another instance than made them, sends each one's state as it
/// opens, in the order the request named them, once each; a task that is not there (a
/// well-formed id no task has) sends nothing and holds up none of the others. The reads go to the
/// real Redis together (`listen::TASK_READS_AT_ONCE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_naming_many_tasks_sends_each_state_once_in_the_order_named() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("tasks-many");
    let (a, b) = (instance(&url, &prefix).await, instance(&url, &prefix).await);
    let mut named = Vec::new();
    for _ in 0..40 {
        named.push(parked_task(&a).await);
    }
    // Named newest first, so that the order sent is the request's, not the order of creation.
    named.reverse();
    let missing = "A".repeat(22);
    let mut asked = named.clone();
    asked.insert(20, missing.clone());
    let mut listen = json!({"notifications": {"taskIds": asked}});
    listen["_meta"] = with_tasks();
    let (status, _, mut stream) = b.modern(json!("L"), "subscriptions/listen", listen).open().await;
    assert_eq!(status, 200);
    let events = common::read_events(&mut stream, 1 + named.len()).await;
    assert_eq!(events[0]["params"]["notifications"]["taskIds"], json!(asked), "the acknowledgement");
    let sent: Vec<(&str, &str)> = events[1..]
        .iter()
        .map(|event| {
            assert_eq!(event["method"], "notifications/tasks", "{event}");
            (event["params"]["taskId"].as_str().unwrap(), event["params"]["status"].as_str().unwrap())
        })
        .collect();
    let expected: Vec<(&str, &str)> = named.iter().map(|id| (id.as_str(), "input_required")).collect();
    assert_eq!(sent, expected);
    // Nothing more until something changes: an answer to one task sends that task, once.
    let first = &named[0];
    let answer = json!({"taskId": first, "inputResponses": {"a": {"action": "accept", "content": {"name": "Ada"}}}});
    task_call(&a, "tasks/update", answer).await;
    let next = common::read_events(&mut stream, 1).await.remove(0);
    assert_eq!(next["params"]["taskId"], json!(first), "the next event is the changed task: {next}");
}
