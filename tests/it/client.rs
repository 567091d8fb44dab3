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
    // So do the annotated arguments below the root.
    let nested = client.call_tool("region", json!({"region": "eu", "placement": {"zone": "Zone ä"}})).await.unwrap();
    assert_eq!(nested.joined_text(), "eu Zone ä");
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
        ServerSpec::new("alpha", url(&a.server), ClientOptions::default()).trusted(),
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
    assert_eq!(read_only_asked.load(Ordering::SeqCst), 0, "a trusted server's read-only tools need no consent");
    // The same tool, marked read-only the same way by a server whose annotations the host was
    // not told to believe, asks first: a server could mark a destructive tool read-only.
    assert!(matches!(host.call("beta.weather", json!({}), &deny).await, Err(HostError::ConsentDenied(_))));
    assert_eq!(read_only_asked.load(Ordering::SeqCst), 1, "an untrusted server's annotations are not believed");
    assert!(!host.tools().iter().find(|t| t.name == "beta.weather").unwrap().read_only);

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

/// One server down, one whose listing fails and one that declares no tools do not cost the
/// host the others: it offers the tools of the servers it could list, names the rest with why,
/// and a call to a server it never reached fails as unavailable before any consent is asked. A
/// server that lists a name twice cannot have its later copy change how the tool is gated.
#[tokio::test]
async fn the_host_serves_the_servers_it_could_reach_and_names_the_rest() {
    let good = fixture().await;
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let serving = |name: &'static str, listing: Option<Value>| {
        common::upstream::serve(move |request| {
            let listing = listing.clone();
            async move {
                let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                let capabilities = if listing.is_some() { json!({"tools": {}}) } else { json!({"prompts": {}}) };
                let reply = match message["method"].as_str().unwrap_or_default() {
                    "server/discover" => {
                        json!({"jsonrpc": "2.0", "id": message["id"], "result": {"supportedVersions": ["2026-07-28"],
                        "capabilities": capabilities, "serverInfo": {"name": name, "version": "1"}}})
                    }
                    "tools/list" => match &listing {
                        Some(Value::Null) => {
                            json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": "listing broke"}})
                        }
                        Some(tools) => json!({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": tools}}),
                        None => {
                            json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no tools here"}})
                        }
                    },
                    _ => {
                        json!({"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": "ran"}]}})
                    }
                };
                (200, serde_json::to_vec(&reply).unwrap().into())
            }
        })
    };
    let broken = serving("broken", Some(Value::Null)).await;
    let prompts_only = serving("prompts", None).await;
    let twice = serving(
        "twice",
        Some(json!([
            {"name": "wipe", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": false}},
            {"name": "wipe", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        ])),
    )
    .await;
    let servers = [
        ServerSpec::new("alpha", url(&good.server), ClientOptions::default()),
        ServerSpec::new("down", format!("http://{down}/api/mcp"), ClientOptions::default()),
        ServerSpec::new("broken", format!("http://{broken}/api/mcp"), ClientOptions::default()),
        ServerSpec::new("prompts", format!("http://{prompts_only}/api/mcp"), ClientOptions::default()),
        // Trusted, so that its annotations count at all.
        ServerSpec::new("twice", format!("http://{twice}/api/mcp"), ClientOptions::default()).trusted(),
    ];
    let host = common::bounded("connecting", Host::connect(&servers)).await.expect("the host connects");
    let unavailable: Vec<&str> = host.unavailable().keys().map(String::as_str).collect();
    assert_eq!(unavailable, ["broken", "down"]);
    assert!(host.unavailable()["broken"].to_string().contains("listing broke"), "{}", host.unavailable()["broken"]);
    assert_eq!(host.server_ids(), ["alpha", "broken", "prompts", "twice"]);
    let names: Vec<&str> = host.tools().iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"alpha.echo"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("down.") || n.starts_with("broken.") || n.starts_with("prompts.")));
    assert_eq!(names.iter().filter(|n| **n == "twice.wipe").count(), 1, "a name listed twice is one tool");

    let asked = Arc::new(AtomicUsize::new(0));
    let deny = consent(Ok(false), asked.clone());
    match host.call("down.anything", json!({}), &deny).await {
        Err(HostError::Unavailable { server_id, .. }) => assert_eq!(server_id, "down"),
        other => panic!("{other:?}"),
    }
    assert_eq!(asked.load(Ordering::SeqCst), 0, "no consent is asked for a server never reached");
    assert!(matches!(host.call("twice.wipe", json!({}), &deny).await, Err(HostError::ConsentDenied(_))));
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the first listing, not read-only, is what gates the tool");
}

/// A hostile server cannot make the client hold an answer of any size or page forever: a body
/// over `max_response_bytes`, a `nextCursor` chain longer than `max_pages` (or one that comes back
/// to a cursor it gave before) and a listing of more than `max_tools` tools end in clear errors.
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

    // Cursors that come back, at once or after another, and a listing of more tools than the
    // client keeps: each page lists `per_page` tools and names the next cursor after `cursor`.
    let listing = |cycle: &'static [&'static str], per_page: usize| {
        common::upstream::serve(move |request| async move {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let result = match message["method"].as_str().unwrap_or_default() {
                "server/discover" => json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                    "serverInfo": {"name": "loop", "version": "1"}}),
                _ => {
                    let at = cycle.iter().position(|c| Some(*c) == message["params"]["cursor"].as_str());
                    let next = cycle[at.map_or(0, |at| (at + 1) % cycle.len())];
                    let tools: Vec<Value> = (0..per_page)
                        .map(|n| json!({"name": format!("t{n}"), "inputSchema": {"type": "object"}}))
                        .collect();
                    json!({"tools": tools, "nextCursor": next})
                }
            };
            (200, serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": message["id"], "result": result})).unwrap().into())
        })
    };
    for cycle in [&["same"][..], &["a", "b"][..], &["a", "b", "c"][..]] {
        let server = listing(cycle, 0).await;
        let client = Client::connect(&format!("http://{server}/api/mcp"), ClientOptions::default()).await.unwrap();
        let error = client.list_tools().await.unwrap_err();
        assert!(error.to_string().contains("a nextCursor it had returned before"), "{cycle:?}: {error}");
    }
    let server = listing(&["a", "b", "c", "d", "e", "f"], 40).await;
    let options = ClientOptions { max_tools: 100, ..ClientOptions::default() };
    let client = Client::connect(&format!("http://{server}/api/mcp"), options).await.unwrap();
    let error = client.list_tools().await.unwrap_err();
    assert!(error.to_string().contains("more than 100 tools"), "{error}");
}

/// A 2025-11-25 server (its `server/discover` a bare 404) that asks the client something on the
/// stream of every call, and again on the reply to every answer: the client answers what the
/// call's stream asks, at most `max_input_requests` of it, and never what a reply asks, so a
/// server cannot keep it answering (each answer a prompt to the user, or a model call) for ever.
#[tokio::test]
async fn a_legacy_server_cannot_keep_the_client_answering() {
    use bytes::Bytes;
    let ask = |id: usize| {
        format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":\"s{id}\",\"method\":\"sampling/createMessage\",\"params\":{{}}}}\n\n"
        )
    };
    for (asks_on_the_call, asks_on_replies, expected_answers, expected) in
        [(1, true, 1, "on the reply to an answer"), (40, false, 3, "more than 3 things")]
    {
        let server = common::upstream::serve_typed(move |request| async move {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let json = |result: Value| {
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                (200, Some("application/json"), Bytes::from(serde_json::to_vec(&reply).unwrap()))
            };
            match message["method"].as_str() {
                Some("server/discover") => (404, None, Bytes::new()),
                Some("initialize") => json(json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "asking", "version": "1"}})),
                Some("tools/list") => json(json!({"tools": []})),
                Some("tools/call") => {
                    (200, Some("text/event-stream"), (0..asks_on_the_call).map(ask).collect::<String>().into())
                }
                Some(_) => (202, None, Bytes::new()),
                // An answer (a JSON-RPC response) from the client.
                None if asks_on_replies => (200, Some("text/event-stream"), ask(99).into()),
                None => (202, None, Bytes::new()),
            }
        })
        .await;
        let answers = Arc::new(AtomicUsize::new(0));
        let counted = answers.clone();
        let options = ClientOptions { max_input_requests: 3, ..ClientOptions::default() }.handler(
            "sampling/createMessage",
            move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"})) }
            },
        );
        let client = Client::connect(&format!("http://{server}/api/mcp"), options).await.unwrap();
        assert_ne!(client.negotiated(), Negotiated::Modern);
        let error = common::bounded("the call", client.call_tool("anything", json!({}))).await.unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
        assert_eq!(answers.load(Ordering::SeqCst), expected_answers);
    }
}

/// A 2025-11-25 server that pings the client on a call's stream gets an empty result for each
/// ping, as the spec asks of every party, and pings do not count toward `max_input_requests`
/// (they ask nothing of the user): a long call pinged often is not cut off by them.
#[tokio::test]
async fn a_legacy_server_s_pings_are_answered_and_not_counted() {
    use bytes::Bytes;
    let replies = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let seen = replies.clone();
    let server = common::upstream::serve_typed(move |request| {
        let seen = seen.clone();
        async move {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let json = |result: Value| {
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                (200, Some("application/json"), Bytes::from(serde_json::to_vec(&reply).unwrap()))
            };
            match message["method"].as_str() {
                Some("server/discover") => (404, None, Bytes::new()),
                Some("initialize") => json(json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "pinging", "version": "1"}})),
                Some("tools/list") => json(json!({"tools": []})),
                Some("tools/call") => {
                    let mut stream: String = (0..20)
                        .map(|n| format!("event: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":\"p{n}\",\"method\":\"ping\"}}\n\n"))
                        .collect();
                    let done = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": "done"}]}});
                    stream.push_str(&format!("event: message\ndata: {done}\n\n"));
                    (200, Some("text/event-stream"), stream.into())
                }
                Some(_) => (202, None, Bytes::new()),
                None => {
                    seen.lock().unwrap().push(message);
                    (202, None, Bytes::new())
                }
            }
        }
    })
    .await;
    let options = ClientOptions { max_input_requests: 3, ..ClientOptions::default() };
    let client = Client::connect(&format!("http://{server}/api/mcp"), options).await.unwrap();
    assert_ne!(client.negotiated(), Negotiated::Modern);
    let result = common::bounded("the call", client.call_tool("long", json!({}))).await.unwrap();
    assert_eq!(result.joined_text(), "done");
    let replies = replies.lock().unwrap();
    assert_eq!(replies.len(), 20, "each ping answered");
    for (n, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &json!({"jsonrpc": "2.0", "id": format!("p{n}"), "result": {}}));
    }
}

/// One `input_required` round may ask at most `max_input_requests` things, and only what the
/// client declared (its elicitation is form mode): past either, the call fails and no handler
/// runs for the rest.
#[tokio::test]
async fn an_input_round_is_bounded_to_what_the_client_declared() {
    use bytes::Bytes;
    for (requests, expected) in [
        ((0..20).map(|n| (format!("q{n}"), json!({"method": "elicitation/create", "params": {"mode": "form", "message": "?", "requestedSchema": {"type": "object"}}}))).collect::<serde_json::Map<_, _>>(), "asked 20 things"),
        ([("u".to_owned(), json!({"method": "elicitation/create", "params": {"mode": "url", "message": "?", "url": "https://x.example", "elicitationId": "e"}}))].into_iter().collect(), "undeclared elicitation mode"),
    ] {
        let server = common::upstream::serve_typed(move |request| {
            let requests = requests.clone();
            async move {
                let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                let result = match message["method"].as_str() {
                    Some("server/discover") => json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                        "serverInfo": {"name": "asking", "version": "1"}}),
                    Some("tools/list") => json!({"tools": []}),
                    _ => json!({"resultType": "input_required", "inputRequests": requests}),
                };
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                (200, Some("application/json"), Bytes::from(serde_json::to_vec(&reply).unwrap()))
            }
        })
        .await;
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        let options = ClientOptions::default().handler("elicitation/create", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"action": "decline"})) }
        });
        let client = Client::connect(&format!("http://{server}/api/mcp"), options).await.unwrap();
        let error = client.call_tool("anything", json!({})).await.unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
        assert_eq!(asked.load(Ordering::SeqCst), 0, "no handler ran");
    }
}

/// A tool that annotates an argument with `x-mcp-header` is called with its `Mcp-Param-*`
/// header even when the caller never listed the tools first (the client lists them before the
/// first call of a tool it has not seen), and with a whole number sent as a float; a strict
/// server refused such a call before.
#[tokio::test]
async fn a_header_argument_is_sent_without_listing_first() {
    let mut server = vercel_mcp::McpServer::new("headers", "1");
    server.tool(
        vercel_mcp::server::ToolDef::new("region").description("Echo a region"),
        |_, args: RegionArgs| async move { format!("{} {}", args.region, args.zone) },
    );
    let client = vercel_mcp::testing::client(server).await;
    let reply = client.call_tool("region", json!({"region": "eu", "zone": 3.0})).await.unwrap();
    assert_eq!(reply.joined_text(), "eu 3");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct RegionArgs {
    /// The region.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
    /// The zone.
    #[schemars(extend("x-mcp-header" = "Zone"))]
    zone: i64,
}

/// A call made in process waits at most `timeout` for the server, as one over HTTP does: a tool
/// that never finishes does not hang the test that calls it.
#[tokio::test]
async fn an_in_process_call_times_out() {
    let mut server = vercel_mcp::McpServer::new("slow", "1");
    server.tool(
        vercel_mcp::server::ToolDef::new("forever").description("Never ends"),
        |_, _: vercel_mcp::server::NoArguments| async {
            std::future::pending::<()>().await;
            "never"
        },
    );
    let parts = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let app = Arc::new(vercel_mcp::App::new(server, parts.endpoint()));
    let options = ClientOptions { timeout: std::time::Duration::from_millis(200), ..ClientOptions::default() };
    let client = Client::in_process(app, options).await.unwrap();
    let error = common::bounded("the call", client.call_tool("forever", json!({}))).await.unwrap_err();
    assert!(matches!(error, ClientError::Transport(ref text) if text.contains("timed out")), "{error}");
}

/// A hand-written HTTP/1.1 server on loopback that answers `server/discover` itself (as a
/// 2026-07-28 server named `name`) and hands every other request, with its connection, to
/// `answer`, which writes the response; the connection ends with it.
async fn streaming_server<F, Fut>(name: &'static str, answer: F) -> std::net::SocketAddr
where
    F: Fn(Value, tokio::net::TcpStream) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Some(body) = next_request_body(&mut stream, &mut seen).await {
                    if body["method"] != "server/discover" {
                        return answer(body, stream).await;
                    }
                    let reply =
                        json!({"jsonrpc": "2.0", "id": body["id"], "result": {"supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {}}, "serverInfo": {"name": name, "version": "1"}}})
                        .to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        reply.len()
                    );
                    if stream.write_all(format!("{head}{reply}").as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A server that keeps a response open and sends a byte now and then holds nothing for long: an
/// SSE response is read for at most `max_stream_duration`, however often it sends, and a listen
/// refusal whose body never ends is read for at most `timeout`.
#[tokio::test]
async fn a_dripping_server_holds_the_client_for_a_bounded_time() {
    use tokio::io::AsyncWriteExt;
    let addr = streaming_server("drip", |body, mut stream| async move {
        let (status, kind) = if body["method"] == "subscriptions/listen" {
            ("400 Bad Request", "application/json")
        } else {
            ("200 OK", "text/event-stream")
        };
        let head = format!("HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ntransfer-encoding: chunked\r\n\r\n");
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        // A two-byte chunk (an SSE comment, or JSON whitespace) every 50 ms, for ever.
        while stream.write_all(b"2\r\n:\n\r\n").await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let options = ClientOptions {
        timeout: std::time::Duration::from_millis(500),
        max_stream_duration: std::time::Duration::from_millis(500),
        ..ClientOptions::default()
    };
    let client = Client::connect(&format!("http://{addr}/api/mcp"), options).await.unwrap();
    let error = common::bounded("the call", client.call_tool("anything", json!({}))).await.unwrap_err();
    assert!(error.to_string().contains("timed out"), "{error}");
    let refused = common::bounded("the listen", client.listen(json!({"toolsListChanged": true}))).await;
    assert!(matches!(refused, Err(ClientError::Http(400, _))), "{:?}", refused.err());
}

/// A server that keeps the socket full (comments as fast as it can write them) holds a call's
/// stream and a listen stream no longer than `max_stream_duration`: there is always a frame ready,
/// so only a check of the clock before each read ends them (the response-size bound is lifted
/// here, so that it cannot be what ends the call).
#[tokio::test]
async fn a_flooding_server_holds_the_client_for_a_bounded_time() {
    use tokio::io::AsyncWriteExt;
    let addr = streaming_server("flood", |_, mut stream| async move {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let comments = ":\n".repeat(32 * 1024);
        let chunk = format!("{:x}\r\n{comments}\r\n", comments.len());
        while stream.write_all(chunk.as_bytes()).await.is_ok() {}
    })
    .await;
    let options = ClientOptions {
        timeout: std::time::Duration::from_secs(5),
        max_stream_duration: std::time::Duration::from_millis(300),
        listen_silence: std::time::Duration::from_secs(5),
        max_response_bytes: usize::MAX,
        ..ClientOptions::default()
    };
    let client = Client::connect(&format!("http://{addr}/api/mcp"), options).await.unwrap();
    let error = common::bounded("the call", client.call_tool("anything", json!({}))).await.unwrap_err();
    assert!(error.to_string().contains("timed out"), "{error}");
    let mut flooded = client.listen(json!({"toolsListChanged": true})).await.unwrap();
    assert_eq!(common::bounded("the flooded listen", flooded.recv()).await, None, "it closes");
}

/// A name with no tool part names no tool: unknown, and no consent is asked; a consent callback
/// that panics before its future is a no, not a panic out of the host.
#[tokio::test]
async fn the_host_refuses_a_bare_server_name_and_survives_a_panicking_consent() {
    let f = fixture().await;
    let host = Host::connect(&[ServerSpec::new("alpha", url(&f.server), ClientOptions::default())]).await.unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let counting: ConsentFn = Arc::new(move |_, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(true) })
    });
    for bare in ["alpha", "alpha."] {
        let error = host.call(bare, json!({}), &counting).await.unwrap_err();
        assert!(matches!(error, HostError::UnknownServer { .. }), "{bare}: {error:?}");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    let panicking: ConsentFn = Arc::new(|_, _| panic!("consent bug"));
    let error = host.call("alpha.echo", json!({"message": "hi"}), &panicking).await.unwrap_err();
    assert!(matches!(error, HostError::ConsentDenied(_)), "{error:?}");
}

/// A JSON answer naming another request's id is not this request's answer: a protocol error,
/// not a result taken for the call's.
#[tokio::test]
async fn an_answer_naming_another_request_is_refused() {
    let server = common::upstream::serve(|request| async move {
        let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let (id, result) = match message["method"].as_str().unwrap_or_default() {
            "server/discover" => (
                message["id"].clone(),
                json!({"supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "mixed", "version": "1"}}),
            ),
            "tools/list" => (message["id"].clone(), json!({"tools": []})),
            _ => (json!(987_654), json!({"content": [{"type": "text", "text": "someone else's"}]})),
        };
        (200, serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap().into())
    })
    .await;
    let client = Client::connect(&format!("http://{server}/api/mcp"), ClientOptions::default()).await.unwrap();
    let error = client.call_tool("anything", json!({})).await.unwrap_err();
    assert!(error.to_string().contains("another request's id"), "{error}");
}

/// Headers given to the client (a token, usually) go over TLS or to this machine only: plain
/// http to another host is refused before anything is sent; to a loopback address it is fine.
#[tokio::test]
async fn headers_are_never_sent_in_clear_to_another_host() {
    let with_token = || ClientOptions::default().header("Authorization", "Bearer secret-token");
    for url in ["http://mcp.example.com/api/mcp", "http://10.0.0.7:3000/api/mcp", "http://[2001:db8::1]/api/mcp"] {
        let refused = Client::connect(url, with_token()).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("refusing to send headers over plain http"), "{url}: {refused}");
    }
    let f = fixture().await;
    assert!(Client::connect(&url(&f.server), with_token()).await.is_ok(), "loopback is fine");
    let localhost = format!("http://localhost:{}/api/mcp", f.server.addr.port());
    assert!(Client::connect(&localhost, with_token()).await.is_ok(), "and so is localhost");
}

/// A 2025-11-25 server that no longer knows the client's session (it expired, or the server's
/// sealing key rotated) answers 404: the client starts a new session and sends the request again,
/// once. A server that answers 404 to the new session too gets no third handshake.
#[tokio::test]
async fn a_lost_legacy_session_is_started_again() {
    use bytes::Bytes;
    use std::sync::atomic::AtomicBool;
    for forgets_every_session in [false, true] {
        let (handshakes, forgot) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (counted, forgetting) = (handshakes.clone(), forgot.clone());
        let server = common::upstream::serve_with_headers(move |request| {
            let (counted, forgetting) = (counted.clone(), forgetting.clone());
            async move {
                let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                let session = request.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
                let current = format!("s{}", counted.load(Ordering::SeqCst));
                let json = |result: Value| {
                    let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                    (200, vec![("content-type", "application/json".to_owned())], Bytes::from(reply.to_string()))
                };
                match message["method"].as_str() {
                    Some("server/discover") => (404, vec![], Bytes::new()),
                    // The newest session acknowledges (the forgetting below is the requests' alone).
                    Some("notifications/initialized") if session.as_deref() == Some(current.as_str()) => {
                        (202, vec![], Bytes::new())
                    }
                    Some("initialize") => {
                        let issued = format!("s{}", counted.fetch_add(1, Ordering::SeqCst) + 1);
                        let (status, mut headers, body) = json(json!({"protocolVersion": "2025-11-25",
                            "capabilities": {"tools": {}}, "serverInfo": {"name": "forgetful", "version": "1"}}));
                        headers.push(("mcp-session-id", issued));
                        (status, headers, body)
                    }
                    _ if session.as_deref() != Some(current.as_str()) || forgetting.load(Ordering::SeqCst) => {
                        (404, vec![], Bytes::new())
                    }
                    Some("tools/list") => json(json!({"tools": []})),
                    _ => (202, vec![], Bytes::new()),
                }
            }
        })
        .await;
        let client = Client::connect(&format!("http://{server}/api/mcp"), ClientOptions::default()).await.unwrap();
        assert_ne!(client.negotiated(), Negotiated::Modern);
        assert!(client.list_tools().await.unwrap().is_empty());
        // The server forgets the session: the next request starts a new one.
        handshakes.fetch_add(1, Ordering::SeqCst);
        forgot.store(forgets_every_session, Ordering::SeqCst);
        let listed = client.list_tools().await;
        if forgets_every_session {
            assert!(listed.is_err(), "still 404 after a new session: an error, not a loop");
        } else {
            assert!(listed.unwrap().is_empty(), "answered on the new session");
        }
        assert_eq!(handshakes.load(Ordering::SeqCst), 3, "one new handshake (the count was moved on by one)");
    }
}

/// What a 2025-11-25 server asks on a call's stream is held to what the client declared, as an
/// `input_required` round is: a URL elicitation never reaches the form handler.
#[tokio::test]
async fn a_legacy_server_cannot_ask_for_an_undeclared_elicitation_mode() {
    use bytes::Bytes;
    let server = common::upstream::serve_typed(move |request| async move {
        let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let json = |result: Value| {
            let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
            (200, Some("application/json"), Bytes::from(reply.to_string()))
        };
        match message["method"].as_str() {
            Some("server/discover") => (404, None, Bytes::new()),
            Some("initialize") => json(json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "phishing", "version": "1"}})),
            Some("tools/list") => json(json!({"tools": []})),
            Some("tools/call") => {
                let ask = json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": {
                    "mode": "url", "message": "sign in", "url": "https://login.example", "elicitationId": "x"}});
                (200, Some("text/event-stream"), format!("event: message\ndata: {ask}\n\n").into())
            }
            _ => (202, None, Bytes::new()),
        }
    })
    .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let options = with_elicitation().handler("elicitation/create", move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok(json!({"action": "accept", "content": {}})) }
    });
    let client = Client::connect(&format!("http://{server}/api/mcp"), options).await.unwrap();
    let error = common::bounded("the call", client.call_tool("anything", json!({}))).await.unwrap_err();
    assert!(error.to_string().contains("undeclared elicitation mode"), "{error}");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the form handler never saw it");
}

/// A result whose `resultType` the client does not know (or `task`, an extension it never
/// declared) is a protocol error, not a success; an absent one means `complete`.
#[tokio::test]
async fn an_unknown_result_type_is_refused() {
    use bytes::Bytes;
    for (result_type, accepted) in
        [(json!("bogus"), false), (json!("task"), false), (json!(7), false), (Value::Null, true)]
    {
        let server = common::upstream::serve_typed(move |request| {
            let result_type = result_type.clone();
            async move {
                let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                let result = match message["method"].as_str() {
                    Some("server/discover") => {
                        json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                        "serverInfo": {"name": "odd", "version": "1"}})
                    }
                    Some("tools/list") => json!({"tools": []}),
                    _ if result_type.is_null() => json!({"content": [{"type": "text", "text": "done"}]}),
                    _ => json!({"resultType": result_type, "content": [{"type": "text", "text": "done"}]}),
                };
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                (200, Some("application/json"), Bytes::from(reply.to_string()))
            }
        })
        .await;
        let client = Client::connect(&format!("http://{server}/api/mcp"), ClientOptions::default()).await.unwrap();
        let called = client.call_tool("anything", json!({})).await;
        match accepted {
            true => assert_eq!(called.unwrap().joined_text(), "done"),
            false => {
                let error = called.unwrap_err();
                assert!(
                    matches!(error, ClientError::Protocol(_)) && error.to_string().contains("resultType"),
                    "{error}"
                );
            }
        }
    }
}

/// A listen stream that goes silent (no keep-alive for longer than `listen_silence`: the server is
/// gone, or the connection half-open) ends, and the receiver sees it close; a listen answered
/// with a JSON error and a 2xx status is that error, not a stream that closes without a word.
#[tokio::test]
async fn a_silent_or_streamless_listen_ends() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let streams = Arc::new(AtomicUsize::new(0));
    let counted = streams.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Some(body) = next_request_body(&mut stream, &mut seen).await {
                    let json = |payload: Value| {
                        let payload = payload.to_string();
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{payload}",
                            payload.len()
                        )
                    };
                    let answer = if body["method"] == "server/discover" {
                        json(json!({"jsonrpc": "2.0", "id": body["id"], "result": {"supportedVersions": ["2026-07-28"],
                            "capabilities": {"tools": {}}, "serverInfo": {"name": "silent", "version": "1"}}}))
                    } else if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                        // The first listen: a stream that sends its head and one comment, then nothing.
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n3\r\n:\n\n\r\n".to_owned()
                    } else {
                        json(
                            json!({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32602, "message": "bad filter"}}),
                        )
                    };
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let options = ClientOptions { listen_silence: std::time::Duration::from_millis(300), ..ClientOptions::default() };
    let client = Client::connect(&format!("http://{addr}/api/mcp"), options).await.unwrap();
    let mut silent = client.listen(json!({"toolsListChanged": true})).await.unwrap();
    assert_eq!(common::bounded("the silent stream", silent.recv()).await, None, "it closes");
    let refused = common::bounded("the listen", client.listen(json!({"toolsListChanged": true}))).await;
    assert!(matches!(&refused, Err(ClientError::Rpc { code: -32602, .. })), "{:?}", refused.err());
}

/// Every message after `initialize`, its acknowledgement included, carries the version the
/// server chose: a server that chose 2025-06-18 refuses a `notifications/initialized` sent as
/// 2025-11-25, and the client could not connect to it.
#[tokio::test]
async fn the_handshake_is_acknowledged_in_the_version_the_server_chose() {
    use bytes::Bytes;
    let server = common::upstream::serve_typed(move |request| async move {
        let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let version = request.headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let json = |result: Value| {
            let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
            (200, Some("application/json"), Bytes::from(reply.to_string()))
        };
        match message["method"].as_str() {
            Some("server/discover") => (404, None, Bytes::new()),
            Some("initialize") => json(json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "older", "version": "1"}})),
            _ if version.as_deref() != Some("2025-06-18") => (400, None, Bytes::new()),
            Some("notifications/initialized") => (202, None, Bytes::new()),
            Some("tools/list") => json(json!({"tools": []})),
            _ => (400, None, Bytes::new()),
        }
    })
    .await;
    let client = Client::connect(&format!("http://{server}/api/mcp"), ClientOptions::default()).await.unwrap();
    assert_eq!(client.negotiated(), Negotiated::Legacy("2025-06-18"));
    assert!(client.list_tools().await.unwrap().is_empty());
}

/// A renewal that fails (the server errs on the new `initialize`) keeps the session the client
/// held, so the next 404 tries the renewal again; before, the client went on with no session and
/// never renewed it.
#[tokio::test]
async fn a_failed_session_renewal_is_tried_again() {
    use bytes::Bytes;
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counted = handshakes.clone();
    let server = common::upstream::serve_with_headers(move |request| {
        let counted = counted.clone();
        async move {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let session = request.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let json = |result: Value| {
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                (200, vec![("content-type", "application/json".to_owned())], Bytes::from(reply.to_string()))
            };
            match message["method"].as_str() {
                Some("server/discover") => (404, vec![], Bytes::new()),
                Some("notifications/initialized") => (202, vec![], Bytes::new()),
                Some("initialize") => match counted.fetch_add(1, Ordering::SeqCst) {
                    // The first renewal fails.
                    1 => (500, vec![], Bytes::new()),
                    n => {
                        let (status, mut headers, body) = json(json!({"protocolVersion": "2025-11-25",
                            "capabilities": {"tools": {}}, "serverInfo": {"name": "flaky", "version": "1"}}));
                        headers.push(("mcp-session-id", format!("s{n}")));
                        (status, headers, body)
                    }
                },
                // Only the latest session is known (s0 is forgotten once a renewal is due).
                Some("tools/list") if session.as_deref() == Some("s2") => json(json!({"tools": []})),
                _ => (404, vec![], Bytes::new()),
            }
        }
    })
    .await;
    let client = Client::connect(&format!("http://{server}/api/mcp"), ClientOptions::default()).await.unwrap();
    assert!(client.list_tools().await.is_err(), "s0 is forgotten and the renewal fails");
    assert!(client.list_tools().await.unwrap().is_empty(), "the renewal owed is made at the next 404");
    assert_eq!(handshakes.load(Ordering::SeqCst), 3);
}

/// The JSON body of the next request on a hand-written server's connection (`None` once the
/// client closes it): just enough HTTP/1.1 for a server that must do what hyper would not let a
/// test do (drip a body for ever, go silent in the middle of a stream).
async fn next_request_body(stream: &mut tokio::net::TcpStream, seen: &mut Vec<u8>) -> Option<Value> {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(seen).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length: usize = text[..head_end]
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if seen.len() >= head_end + 4 + length {
                let body = serde_json::from_slice(&seen[head_end + 4..head_end + 4 + length]).unwrap_or(Value::Null);
                seen.drain(..head_end + 4 + length);
                return Some(body);
            }
        }
        let Ok(n @ 1..) = stream.read(&mut chunk).await else { return None };
        seen.extend_from_slice(&chunk[..n]);
    }
}

/// A new session that speaks another version than the client negotiated is not taken: the call
/// fails saying so, and the client keeps the session it held (no half-opened session whose
/// acknowledgement was never sent).
#[tokio::test]
async fn a_renewal_in_another_version_is_not_taken() {
    use bytes::Bytes;
    let sent_sessions = Arc::new(Mutex::new(Vec::new()));
    let (handshakes, seen) = (Arc::new(AtomicUsize::new(0)), sent_sessions.clone());
    let counted = handshakes.clone();
    let server = common::upstream::serve_with_headers(move |request| {
        let (counted, seen) = (counted.clone(), seen.clone());
        async move {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let session = request.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
            match message["method"].as_str() {
                Some("server/discover") => (404, vec![], Bytes::new()),
                Some("notifications/initialized") => (202, vec![], Bytes::new()),
                Some("initialize") => {
                    let n = counted.fetch_add(1, Ordering::SeqCst);
                    let version = if n == 0 { "2025-11-25" } else { "2025-06-18" };
                    let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": version,
                        "capabilities": {"tools": {}}, "serverInfo": {"name": "switching", "version": "1"}}});
                    let headers =
                        vec![("content-type", "application/json".to_owned()), ("mcp-session-id", format!("s{n}"))];
                    (200, headers, Bytes::from(reply.to_string()))
                }
                _ => {
                    seen.lock().unwrap().push(session);
                    (404, vec![], Bytes::new())
                }
            }
        }
    })
    .await;
    let client = Client::connect(&format!("http://{server}/api/mcp"), ClientOptions::default()).await.unwrap();
    for _ in 0..2 {
        let error = client.list_tools().await.unwrap_err();
        assert!(error.to_string().contains("another version"), "{error}");
    }
    assert_eq!(*sent_sessions.lock().unwrap(), [Some("s0".to_owned()), Some("s0".to_owned())], "s0 kept");
    assert_eq!(client.negotiated(), Negotiated::Legacy("2025-11-25"));
}

/// Where the spec leaves a server room, the client reads what it may send: a media type in any
/// case, an error on a stream that could not name its request, and a listing with an entry that
/// is not a tool (dropped; the others kept, so the host still connects). On the last round it
/// allows, the client asks its handlers nothing: there is no round left to send their answers
/// in. A failed tool's reason, for the host, is its first text block that says something.
#[tokio::test]
async fn the_client_reads_what_a_server_may_send_and_asks_only_what_it_can_answer() {
    use bytes::Bytes;
    let server = common::upstream::serve_typed(|request| async move {
        let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let reply =
            |result: Value| Bytes::from(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}).to_string());
        let json = Some("application/json");
        match (message["method"].as_str(), message["params"]["name"].as_str()) {
            (Some("server/discover"), _) => (
                200,
                json,
                reply(json!({"supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "lenient", "version": "1"}})),
            ),
            (Some("tools/list"), _) => (
                200,
                json,
                reply(json!({"tools": [
                {"name": "streamed", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
                {"name": "bad", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": "yes"}},
                {"name": "refusing", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]})),
            ),
            (_, Some("streamed")) => {
                let event = reply(json!({"content": [{"type": "text", "text": "streamed"}]}));
                let event = format!("data: {}\n\n", String::from_utf8_lossy(&event));
                (200, Some("Text/Event-Stream; charset=UTF-8"), Bytes::from(event))
            }
            (_, Some("unreadable")) => {
                let event = r#"data: {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"unreadable"}}"#;
                (200, Some("text/event-stream"), Bytes::from(format!("{event}\n\n")))
            }
            (_, Some("refusing")) => (
                200,
                json,
                reply(json!({"isError": true, "content": [
                {"type": "text", "text": ""}, {"type": "text", "text": "why"}, {"type": "text", "text": "and more"}]})),
            ),
            _ => (
                200,
                json,
                reply(json!({"resultType": "input_required", "requestState": "s", "inputRequests": {
                "q": {"method": "elicitation/create", "params": {"mode": "form", "message": "Go?",
                    "requestedSchema": {"type": "object", "properties": {}}}}}})),
            ),
        }
    })
    .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let options =
        ClientOptions { max_rounds: 1, ..ClientOptions::default() }.handler("elicitation/create", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"action": "decline"})) }
        });
    let url = format!("http://{server}/api/mcp");
    let client = Client::connect(&url, options.clone()).await.unwrap();
    let names: Vec<String> = client.list_tools().await.unwrap().into_iter().map(|tool| tool.name).collect();
    assert_eq!(names, ["streamed", "refusing"], "the entry that is not a tool is dropped");
    assert_eq!(client.call_tool("streamed", json!({})).await.unwrap().joined_text(), "streamed");
    match client.call_tool("unreadable", json!({})).await {
        Err(ClientError::Rpc { code: -32600, .. }) => {}
        other => panic!("the stream's error, whose id is null: {other:?}"),
    }
    match client.call_tool("asking", json!({})).await {
        Err(ClientError::InputRequired(why)) => assert!(why.contains("still asking after 1 rounds"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the one round answered; none asked for the round after it");

    let host = Host::connect(&[ServerSpec::new("lenient", url, options)]).await.unwrap();
    let approve = consent(Ok(true), Arc::new(AtomicUsize::new(0)));
    match host.call("lenient.refusing", json!({}), &approve).await {
        Err(HostError::ToolCall { message, cause: None, .. }) => assert_eq!(message, "why"),
        other => panic!("{other:?}"),
    }
}

/// A tool that runs longer than `timeout` but reports its progress is not cut off: the client
/// asks for progress, so the answer streams, each progress notification reaches
/// `on_notification`, and `timeout` bounds each wait between two messages, not the call.
#[tokio::test]
async fn a_long_call_that_reports_progress_outlasts_the_timeout() {
    let mut server = vercel_mcp::McpServer::new("long", "1");
    server.tool(
        vercel_mcp::server::ToolDef::new("long").description("Reports progress twelve times, 50 ms apart"),
        |ctx, _: vercel_mcp::server::NoArguments| async move {
            for step in 1..=12 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                ctx.progress(f64::from(step), Some(12.0), None).await;
            }
            "finished"
        },
    );
    let parts = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let app = Arc::new(vercel_mcp::App::new(server, parts.endpoint()));
    let progress = Arc::new(Mutex::new(Vec::new()));
    let seen = progress.clone();
    let options = ClientOptions {
        timeout: std::time::Duration::from_millis(400),
        on_notification: Some(Arc::new(move |message: &Value| seen.lock().unwrap().push(message.clone()))),
        ..ClientOptions::default()
    };
    let client = Client::in_process(app, options).await.unwrap();
    let result = common::bounded("the call", client.call_tool("long", json!({}))).await.unwrap();
    assert_eq!(result.joined_text(), "finished");
    let progress = progress.lock().unwrap();
    assert_eq!(progress.len(), 12, "{progress:?}");
    assert!(progress.iter().all(|m| m["method"] == "notifications/progress"), "{progress:?}");
    assert_eq!(progress[11]["params"]["progress"], 12.0);
}

/// A stand-in server whose `tools/call` stream ends after `first`, as a 2025-11-25 server polling
/// over SSE closes it (or, with `cut`, as a connection cut on the way); `resumed` answers each GET from the `Last-Event-ID` it carries. With `modern`,
/// it answers `server/discover` as a 2026-07-28 server. It keeps every GET it is sent, with when,
/// and every message POSTed that is not a request (the client's answers).
struct Polling {
    gets: Mutex<Vec<(std::time::Instant, common::upstream::Seen)>>,
    answers: Mutex<Vec<Value>>,
    /// The GET that resumed `initialize`, whose stream the stand-in also closes early.
    initialize_resumed: Mutex<Option<common::upstream::Seen>>,
}

async fn polling_server(
    modern: bool,
    first: &'static str,
    cut: bool,
    resumed: impl Fn(&str, &Value) -> (u16, Option<&'static str>, String) + Send + Sync + 'static,
) -> (std::net::SocketAddr, Arc<Polling>) {
    use bytes::Bytes;
    let seen = Arc::new(Polling {
        gets: Mutex::new(Vec::new()),
        answers: Mutex::new(Vec::new()),
        initialize_resumed: Mutex::new(None),
    });
    let (kept, resumed, call_id) = (seen.clone(), Arc::new(resumed), Arc::new(Mutex::new(Value::Null)));
    let initialize_id = Arc::new(Mutex::new(Value::Null));
    let server = common::upstream::serve_with_headers(move |request| {
        let (kept, resumed, call_id) = (kept.clone(), resumed.clone(), call_id.clone());
        let initialize_id = initialize_id.clone();
        async move {
            let typed = |content_type: Option<&'static str>| {
                let mut headers = vec![("mcp-session-id", "session-7".to_owned())];
                headers.extend(content_type.map(|t| ("content-type", t.to_owned())));
                headers
            };
            if request.method == http::Method::GET && request.header("last-event-id").as_deref() == Some("i1") {
                *kept.initialize_resumed.lock().unwrap() = Some(request);
                let id = initialize_id.lock().unwrap().clone();
                let result = json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}}, "serverInfo": {"name": "polling", "version": "1"}}});
                return (200, typed(Some("text/event-stream")), Bytes::from(format!("data: {result}\n\n")));
            }
            if request.method == http::Method::GET {
                let last = request.header("last-event-id").unwrap_or_default();
                kept.gets.lock().unwrap().push((std::time::Instant::now(), request));
                let (status, content_type, body) = resumed(&last, &call_id.lock().unwrap());
                return (status, typed(content_type), Bytes::from(body));
            }
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let json = |result: Value| {
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                (200, typed(Some("application/json")), Bytes::from(serde_json::to_vec(&reply).unwrap()))
            };
            match message["method"].as_str() {
                Some("server/discover") if modern => json(json!({"supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {}}, "serverInfo": {"name": "polling", "version": "1"}})),
                Some("server/discover") => (404, Vec::new(), Bytes::new()),
                Some("initialize") => {
                    *initialize_id.lock().unwrap() = message["id"].clone();
                    (200, typed(Some("text/event-stream")), Bytes::from("id: i1\nretry: 0\ndata:\n\n"))
                }
                Some("tools/list") => {
                    json(json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}))
                }
                Some("tools/call") => {
                    *call_id.lock().unwrap() = message["id"].clone();
                    let mut headers = typed(Some("text/event-stream"));
                    if cut {
                        headers.push((common::upstream::CUT_AFTER_BODY, String::new()));
                    }
                    (200, headers, Bytes::from(first))
                }
                Some(_) => (202, typed(None), Bytes::new()),
                None => {
                    kept.answers.lock().unwrap().push(message);
                    (202, typed(None), Bytes::new())
                }
            }
        }
    })
    .await;
    (server, seen)
}

fn sse_answer(id: &Value, text: &str) -> String {
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
    format!("data: {answer}\n\n")
}

/// A 2025-11-25 server may close a call's stream once it has given it an event id, and expects
/// the client to ask for the rest: a GET with `Last-Event-ID`, the session and the caller's
/// headers, sent after the server's `retry`. The rest may end early again, and carry the
/// server's requests; a connection cut on the way is resumed alike, and so is `initialize`'s
/// stream, with the session its response named.
#[tokio::test]
async fn a_legacy_stream_closed_before_its_answer_is_resumed_from_its_last_event() {
    for cut in [false, true] {
        let (server, seen) = polling_server(false, "id: e1\nretry: 150\ndata:\n\n", cut, |last, call| match last {
            "e1" => {
                let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": "t", "progress": 1}});
                let ping = json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"});
                let unfinished = "id: e9\ndata: {\"unfinished\"";
                (200, Some("text/event-stream"), format!("id: e2\ndata: {progress}\n\ndata: {ping}\n\n{unfinished}"))
            }
            "e2" => (200, Some("text/event-stream"), format!("id: e3\n{}", sse_answer(call, "done"))),
            _ => (400, None, String::new()),
        })
        .await;
        let notes = Arc::new(Mutex::new(Vec::new()));
        let sink = notes.clone();
        let options = ClientOptions {
            on_notification: Some(Arc::new(move |n: &Value| sink.lock().unwrap().push(n.clone()))),
            ..ClientOptions::default().header("Authorization", "Bearer polling")
        };
        let client = Client::connect(&format!("http://{server}/mcp"), options).await.unwrap();
        assert_eq!(client.negotiated(), Negotiated::Legacy("2025-11-25"));
        let result = common::bounded("the call", client.call_tool("long", json!({}))).await.unwrap();
        assert_eq!(result.joined_text(), "done", "cut {cut}");
        assert_eq!(notes.lock().unwrap().len(), 1, "the progress the second stream carried");
        assert_eq!(*seen.answers.lock().unwrap(), [json!({"jsonrpc": "2.0", "id": "p1", "result": {}})]);
        let gets = seen.gets.lock().unwrap();
        let resumed_from: Vec<_> = gets.iter().map(|(_, get)| get.header("last-event-id").unwrap()).collect();
        assert_eq!(resumed_from, ["e1", "e2"], "an unfinished event's id is not the last one");
        for (_, get) in gets.iter() {
            assert_eq!(get.header("accept").as_deref(), Some("text/event-stream"));
            assert_eq!(get.header("mcp-session-id").as_deref(), Some("session-7"));
            assert_eq!(get.header("mcp-protocol-version").as_deref(), Some("2025-11-25"));
            assert_eq!(get.header("authorization").as_deref(), Some("Bearer polling"));
            assert!(get.body.is_empty() && get.path() == "/mcp");
        }
        assert!(gets[1].0 - gets[0].0 >= std::time::Duration::from_millis(150), "the server's retry is waited");
        let initialize = seen.initialize_resumed.lock().unwrap().take().expect("initialize was resumed too");
        assert_eq!(initialize.header("mcp-session-id").as_deref(), Some("session-7"), "the session it had just named");
    }
}

/// What a resumption may not do: be refused (the call fails with the status), or have the
/// client call back for ever (a stream that brings nothing is resumed ever more slowly, until
/// the call's time is out; a `retry` past it ends the call at once). A stream without an event
/// id, with one unfit to send back, or a 2026-07-28 stream, is never resumed: the call fails as
/// a stream without an answer does.
#[tokio::test]
async fn a_stream_is_resumed_only_when_it_can_be_and_never_for_ever() {
    let (server, seen) = polling_server(false, "id: e1\ndata:\n\n", false, |_, _| (405, None, String::new())).await;
    let client = Client::connect(&format!("http://{server}/mcp"), ClientOptions::default()).await.unwrap();
    let refused = common::bounded("the call", client.call_tool("long", json!({}))).await.unwrap_err();
    assert!(matches!(refused, ClientError::Http(405, _)), "{refused:?}");
    assert_eq!(seen.gets.lock().unwrap().len(), 1);

    let (server, seen) = polling_server(false, "id: e1\nretry: 0\ndata:\n\n", false, |_, _| {
        (200, Some("text/event-stream"), ": nothing\n\n".into())
    })
    .await;
    let options = ClientOptions { max_stream_duration: std::time::Duration::from_secs(3), ..ClientOptions::default() };
    let client = Client::connect(&format!("http://{server}/mcp"), options).await.unwrap();
    let idle = common::bounded("the call", client.call_tool("long", json!({}))).await.unwrap_err();
    assert!(matches!(&idle, ClientError::Transport(m) if m.contains("too late")), "{idle:?}");
    {
        let gets = seen.gets.lock().unwrap();
        // Waits of 0.1, 0.2, 0.4 and 0.8 s fit in 3 s; the next, 1.6 s, would not.
        assert!((1..=4).contains(&gets.len()), "{} resumptions", gets.len());
        for (n, pair) in gets.windows(2).enumerate() {
            assert!(pair[1].0 - pair[0].0 >= std::time::Duration::from_millis(200 << n), "resumption {n} backed off");
        }
    }

    let (server, seen) =
        polling_server(false, "id: e1\nretry: 600000\ndata:\n\n", false, |_, _| (500, None, String::new())).await;
    let options = ClientOptions { max_stream_duration: std::time::Duration::from_secs(60), ..ClientOptions::default() };
    let client = Client::connect(&format!("http://{server}/mcp"), options).await.unwrap();
    let late = common::bounded("the call", client.call_tool("long", json!({}))).await.unwrap_err();
    assert!(matches!(&late, ClientError::Transport(m) if m.contains("too late")), "{late:?}");
    assert!(seen.gets.lock().unwrap().is_empty());

    let long_id = format!("id: {}\ndata:\n\n", "x".repeat(vercel_mcp::client::MAX_EVENT_ID_BYTES + 1)).leak();
    for (modern, first) in
        [(false, "data:\n\n"), (false, "id: a\u{1}b\ndata:\n\n"), (false, &*long_id), (true, "id: e1\ndata:\n\n")]
    {
        let (server, seen) = polling_server(modern, first, false, |_, _| (500, None, String::new())).await;
        let client = Client::connect(&format!("http://{server}/mcp"), ClientOptions::default()).await.unwrap();
        let ended = common::bounded("the call", client.call_tool("long", json!({}))).await.unwrap_err();
        assert!(matches!(&ended, ClientError::Http(200, m) if m == "no JSON-RPC response"), "{modern}: {ended:?}");
        assert!(seen.gets.lock().unwrap().is_empty(), "modern {modern}, {first:.20}: no GET");
    }
}
