//! The Rust MCP client and the orchestrator host against servers of this project on loopback.

use crate::common;

use common::fixture;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use vercel_mcp::client::host::{ConsentFn, Host, HostError, ServerSpec};
use vercel_mcp::client::{Client, ClientError, ClientOptions, Negotiated};

fn url(server: &common::TestServer) -> String {
    format!("http://{}/api/mcp", server.addr)
}

fn with_elicitation() -> ClientOptions {
    ClientOptions::default()
        .handler("elicitation/create", |_params| async { Ok(json!({"action": "accept", "content": {"name": "Ada"}})) })
}

#[tokio::test]
async fn speaks_2026_07_28_by_default() {
    let f = fixture().await;
    let client = Client::connect(&url(&f.server), ClientOptions::default()).await.unwrap();
    assert_eq!(client.negotiated(), Negotiated::Modern);
    assert_eq!(client.server()["supportedVersions"], json!(["2026-07-28"]));
    let tools = client.list_tools().await.unwrap();
    assert_eq!(tools.len(), 10, "every page is followed");
    let echo = client.call_tool("echo", json!({"message": "héllo"})).await.unwrap();
    assert_eq!(echo.joined_text(), "héllo");
    let raw = client.call_with_input(
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "x"}}).as_object().unwrap().clone(),
    );
    assert_eq!(raw.await.unwrap()["resultType"], "complete");
    // x-mcp-header arguments travel as Mcp-Param-* headers (the server refuses the call otherwise),
    // base64-encoded when they are not plain ASCII.
    for region in ["us-west1", "Zürich 1"] {
        let result = client.call_tool("region", json!({"region": region})).await.unwrap();
        assert_eq!(result.joined_text(), region);
    }
}

#[tokio::test]
async fn input_required_is_fulfilled_through_handlers() {
    let f = fixture().await;
    let client = Client::connect(&url(&f.server), with_elicitation()).await.unwrap();
    let result = client.call_tool("ask", json!({})).await.unwrap();
    assert_eq!(result.joined_text(), "hi Ada");
    let without = Client::connect(&url(&f.server), ClientOptions::default()).await.unwrap();
    match without.call_tool("ask", json!({})).await {
        Err(ClientError::Rpc { code: -32021, .. }) => {}
        other => panic!("expected -32021, got {other:?}"),
    }
}

#[tokio::test]
async fn falls_back_to_the_legacy_handshake() {
    let f = fixture().await;
    let options = ClientOptions { modern: false, ..with_elicitation() };
    let client = Client::connect(&url(&f.server), options).await.unwrap();
    assert_eq!(client.negotiated(), Negotiated::Legacy("2025-11-25"));
    assert_eq!(client.call_tool("echo", json!({"message": "old"})).await.unwrap().joined_text(), "old");
    // The 2025 server asks on the stream; the client answers by POST and gets the result.
    assert_eq!(client.call_tool("ask", json!({})).await.unwrap().joined_text(), "hi Ada");
}

#[tokio::test]
async fn errors_are_typed() {
    let f = fixture().await;
    let client = Client::connect(&url(&f.server), ClientOptions::default()).await.unwrap();
    match client.call_tool("nope", json!({})).await {
        Err(ClientError::Rpc { code: -32602, message, .. }) => assert!(message.contains("not found")),
        other => panic!("{other:?}"),
    }
    let failed = client.call_tool("fail", json!({})).await.unwrap();
    assert!(failed.is_error, "a tool error is a result, not a client error");
    match Client::connect("http://127.0.0.1:1/api/mcp", ClientOptions::default()).await {
        Err(ClientError::Transport(_)) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
    let evil = ClientOptions::default().header("Origin", "https://evil.example");
    assert!(matches!(Client::connect(&url(&f.server), evil).await, Err(ClientError::Http(403, _))));
}

#[tokio::test]
async fn notifications_and_listen_streams() {
    let f = fixture().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = ClientOptions {
        on_notification: Some(Arc::new(move |n: &Value| sink.lock().unwrap().push(n.clone()))),
        ..ClientOptions::default()
    };
    let client = Client::connect(&url(&f.server), options).await.unwrap();
    let mut params = serde_json::Map::new();
    params.insert("name".into(), json!("logs"));
    params.insert("arguments".into(), json!({}));
    params.insert("_meta".into(), json!({"io.modelcontextprotocol/logLevel": "error"}));
    client.request("tools/call", params).await.unwrap();
    let levels: Vec<Value> = seen.lock().unwrap().iter().map(|n| n["params"]["level"].clone()).collect();
    assert_eq!(levels, [json!("error")]);

    let mut stream = client.listen(json!({"toolsListChanged": true})).await.unwrap();
    let ack = common::bounded("the listen acknowledgement", stream.recv()).await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    client.call_tool("change", json!({})).await.unwrap();
    assert_eq!(
        common::bounded("a notification", stream.recv()).await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
}

fn consent(answer: Result<bool, String>, asked: Arc<AtomicUsize>) -> ConsentFn {
    Arc::new(move |_name, _args| {
        asked.fetch_add(1, Ordering::SeqCst);
        let answer = answer.clone();
        Box::pin(async move { answer })
    })
}

#[tokio::test]
async fn the_host_namespaces_routes_and_gates() {
    let (a, b) = (fixture().await, fixture().await);
    let servers = [
        ServerSpec::new("alpha", url(&a.server), ClientOptions::default()),
        ServerSpec::new("beta", url(&b.server), ClientOptions::default()),
    ];
    let host = Host::connect(&servers).await.unwrap();
    assert_eq!(host.server_ids(), ["alpha", "beta"]);
    let names: Vec<&str> = host.tools().iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"alpha.echo") && names.contains(&"beta.count"));
    assert!(!names.contains(&"echo"), "bare names never appear");
    let echo = host.tools().iter().find(|t| t.name == "alpha.echo").unwrap();
    assert_eq!((echo.server_id.as_str(), echo.tool_name.as_str()), ("alpha", "echo"));

    let asked = Arc::new(AtomicUsize::new(0));
    let approve = consent(Ok(true), asked.clone());
    assert!(
        matches!(host.call("nope.echo", json!({}), &approve).await, Err(HostError::UnknownServer { ref server_id, .. }) if server_id == "nope")
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "unknown servers fail before consent");

    for denial in [consent(Ok(false), asked.clone()), consent(Err("user closed the dialog".into()), asked.clone())] {
        assert!(matches!(host.call("beta.count", json!({"n": 1}), &denial).await, Err(HostError::ConsentDenied(_))));
    }
    let panicking: ConsentFn = Arc::new(|_, _| Box::pin(async { panic!("consent UI crashed") }));
    assert!(matches!(host.call("beta.count", json!({"n": 1}), &panicking).await, Err(HostError::ConsentDenied(_))));
    assert_eq!(b.calls.load(Ordering::SeqCst), 0, "denied calls never reach the server");
    host.call("beta.count", json!({"n": 2}), &approve).await.unwrap();
    assert_eq!(b.calls.load(Ordering::SeqCst), 2);

    let read_only_asked = Arc::new(AtomicUsize::new(0));
    let deny = consent(Ok(false), read_only_asked.clone());
    let weather = host.call("alpha.weather", json!({}), &deny).await.unwrap();
    assert_eq!(weather.structured_content.unwrap()["temperature"], 22.5);
    assert_eq!(read_only_asked.load(Ordering::SeqCst), 0, "read-only tools need no consent");

    match host.call("alpha.fail", json!({}), &approve).await {
        Err(HostError::ToolCall { server_id, tool_name, message, cause: None }) => {
            assert_eq!(
                (server_id.as_str(), tool_name.as_str(), message.as_str()),
                ("alpha", "fail", "backend said no: exactly this")
            );
        }
        other => panic!("{other:?}"),
    }
    match host.call("alpha.nope", json!({}), &approve).await {
        Err(HostError::ToolCall { cause: Some(ClientError::Rpc { code: -32602, .. }), .. }) => {}
        other => panic!("{other:?}"),
    }
    match host.call("alpha.count", json!({"n": "two"}), &approve).await {
        Err(HostError::ToolCall { tool_name, cause: None, .. }) => assert_eq!(tool_name, "count"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_server_side_refusal_is_a_typed_error_not_success() {
    // The combined catalogue with authentication off: issue_refund authorizes every call itself,
    // so the anonymous caller is refused (before its handler runs), which the host must surface
    // as a failure of that tool.
    let config = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let server = common::TestServer::start(common::everything_app(&config)).await;
    let host = Host::connect(&[ServerSpec::new("billing", url(&server), ClientOptions::default())]).await.unwrap();
    let approve = consent(Ok(true), Arc::new(AtomicUsize::new(0)));
    match host.call("billing.issue_refund", json!({"invoiceId": "inv-1", "amountCents": 100}), &approve).await {
        Err(HostError::ToolCall { server_id, tool_name, message, cause: None }) => {
            assert_eq!((server_id.as_str(), tool_name.as_str()), ("billing", "issue_refund"));
            assert!(message.contains("insufficient scope"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// A token given for one server never reaches another: the host's headers are per server. A
/// hostile second server records every request it gets and sees no `Authorization` at all; the
/// first server gets its token. A server id given twice is refused, not silently replaced.
#[tokio::test]
async fn the_host_sends_each_token_only_to_its_server() {
    let trusted = fixture().await;
    /// Each request the hostile server got: its method and its `Authorization` header.
    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;
    let seen: Seen = Arc::default();
    let recorder = seen.clone();
    let hostile = common::upstream::serve(move |request| {
        let recorder = recorder.clone();
        async move {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let method = message["method"].as_str().unwrap_or_default().to_owned();
            recorder.lock().unwrap().push((method.clone(), request.header("authorization")));
            let result = match method.as_str() {
                "server/discover" => json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "1"}}),
                _ => json!({"tools": []}),
            };
            (200, serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": message["id"], "result": result})).unwrap().into())
        }
    })
    .await;
    let with_token = ClientOptions::default().header("Authorization", "Bearer token-for-the-trusted-server");
    let servers = [
        ServerSpec::new("trusted", url(&trusted.server), with_token),
        ServerSpec::new("other", format!("http://{hostile}/api/mcp"), ClientOptions::default()),
    ];
    let host = Host::connect(&servers).await.unwrap();
    assert_eq!(host.server_ids(), ["other", "trusted"]);
    let requests = seen.lock().unwrap().clone();
    assert!(requests.iter().any(|(method, _)| method == "tools/list"), "the other server was used: {requests:?}");
    assert!(requests.iter().all(|(_, authorization)| authorization.is_none()), "no token leaked: {requests:?}");

    let twice = [
        ServerSpec::new("same", url(&trusted.server), ClientOptions::default()),
        ServerSpec::new("same", format!("http://{hostile}/api/mcp"), ClientOptions::default()),
    ];
    let refused = Host::connect(&twice).await.err().expect("a repeated id is refused");
    assert!(refused.to_string().contains("twice"), "{refused}");
}

/// A hostile server cannot make the client hold an answer of any size or page forever: a body
/// over `max_response_bytes` and a `nextCursor` chain longer than `max_pages` (or one that
/// repeats) end in clear errors.
#[tokio::test]
async fn the_client_bounds_what_a_server_sends() {
    let pages = Arc::new(AtomicUsize::new(0));
    let counter = pages.clone();
    let endless = common::upstream::serve(move |request| {
        let counter = counter.clone();
        async move {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let result = match message["method"].as_str().unwrap_or_default() {
                "server/discover" => json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                    "serverInfo": {"name": "endless", "version": "1"}}),
                "tools/list" => {
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    json!({"tools": [{"name": format!("t{n}"), "inputSchema": {"type": "object"}}], "nextCursor": format!("c{n}")})
                }
                _ => json!({"padding": "x".repeat(4096)}),
            };
            (200, serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": message["id"], "result": result})).unwrap().into())
        }
    })
    .await;
    let url = format!("http://{endless}/api/mcp");
    let options = ClientOptions { max_pages: 5, max_response_bytes: 1024, ..ClientOptions::default() };
    let client = Client::connect(&url, options).await.unwrap();
    let error = client.list_tools().await.unwrap_err();
    assert!(error.to_string().contains("more than 5 pages"), "{error}");
    assert_eq!(pages.load(Ordering::SeqCst), 5, "it stopped asking");
    let error = client.call_tool("anything", json!({})).await.unwrap_err();
    assert!(error.to_string().contains("larger than 1024 bytes"), "{error}");

    let repeating = common::upstream::serve(|request| async move {
        let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let result = match message["method"].as_str().unwrap_or_default() {
            "server/discover" => json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "loop", "version": "1"}}),
            _ => json!({"tools": [], "nextCursor": "same"}),
        };
        (200, serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": message["id"], "result": result})).unwrap().into())
    })
    .await;
    let client = Client::connect(&format!("http://{repeating}/api/mcp"), ClientOptions::default()).await.unwrap();
    let error = client.list_tools().await.unwrap_err();
    assert!(error.to_string().contains("same nextCursor"), "{error}");
}
