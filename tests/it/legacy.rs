//! The stateless 2025-11-25 path over loopback HTTP.

use crate::common;

use common::{fixture, read_events};
use serde_json::{Value, json};

#[tokio::test]
async fn initialize_is_answered_statelessly_with_a_sealed_session_id() {
    let f = fixture().await;
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}});
    let reply = f.server.post(body.to_string()).send().await;
    assert_eq!(reply.status, 200);
    let result = &reply.json()["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(result["serverInfo"], json!({"name": "test-server", "version": "9.9.9"}));
    assert!(result["capabilities"]["tools"].is_object());
    // Only what the stateless path delivers: no stream carries a list change or a resource update.
    let capabilities = result["capabilities"].as_object().unwrap();
    for (name, capability) in capabilities {
        for promise in ["listChanged", "subscribe"] {
            assert_ne!(capability.get(promise), Some(&json!(true)), "{name}.{promise}: {capabilities:?}");
        }
    }
    assert_eq!(capabilities["tools"]["listChanged"], false);
    assert!(!capabilities.contains_key("extensions"), "the tasks extension is 2026-07-28's");
    assert!(result.get("resultType").is_none());
    let session = reply.header("mcp-session-id").expect("a session id").to_owned();
    assert!(session.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    let unknown = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"1999-01-01"}});
    assert_eq!(f.server.post(unknown.to_string()).send().await.json()["result"]["protocolVersion"], "2025-11-25");
    // 2025-03-26 requires servers to take JSON-RPC batches, which this one refuses: not agreed to.
    let batching = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}});
    assert_eq!(f.server.post(batching.to_string()).send().await.json()["result"]["protocolVersion"], "2025-11-25");
    let batch =
        json!([{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]);
    assert_eq!(f.server.legacy(batch).send().await.status, 400, "a batch is refused");

    let initialized = f
        .server
        .legacy(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .header("Mcp-Session-Id", &session)
        .send()
        .await;
    assert_eq!(initialized.status, 202);
    // Any instance accepts the session id; none needs to remember it.
    let list = f
        .server
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}))
        .header("Mcp-Session-Id", &session)
        .send()
        .await;
    let result = &list.json()["result"];
    assert!(result["tools"].is_array());
    for key in ["resultType", "ttlMs", "cacheScope", "_meta"] {
        assert!(result.get(key).is_none(), "{key} is not a 2025 field");
    }
    let forged = f
        .server
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}))
        .header("Mcp-Session-Id", &format!("{session}x"))
        .send()
        .await;
    assert_eq!(forged.status, 404);
    // So is every other message that names a session no instance issued: a notification, and a
    // response to a server request. A 2026-07-28 message's session id is ignored.
    let forged_session = format!("{session}x");
    for message in [
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":"e1","result":{"action":"decline"}}),
    ] {
        let reply = f.server.legacy(message.clone()).header("Mcp-Session-Id", &forged_session).send().await;
        assert_eq!((reply.status, reply.code()), (404, -32600), "{message}: {}", reply.text());
        assert_eq!(reply.json()["error"]["message"], "Session not found");
        let unversioned = f.server.post(message.to_string()).header("Mcp-Session-Id", &forged_session).send().await;
        assert_eq!(unversioned.status, 404, "no version header is 2025-03-26's: {message}");
    }
    let modern = f
        .server
        .post(json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string())
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Session-Id", &forged_session)
        .send()
        .await;
    assert_eq!(modern.status, 202, "ignored on a 2026-07-28 message");
}

#[tokio::test]
async fn legacy_shapes_and_codes() {
    let f = fixture().await;
    let ping = f.server.legacy(json!({"jsonrpc":"2.0","id":1,"method":"ping","params":{}})).send().await;
    assert_eq!(ping.json()["result"], json!({}));
    let level = f
        .server
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"info"}}))
        .send()
        .await;
    assert_eq!(level.json()["result"], json!({}));
    let missing = f
        .server
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"test://missing"}}))
        .send()
        .await;
    assert_eq!(missing.code(), -32002, "2025 clients get the 2025 code");
    let call = f.server.legacy(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"old"}}}),
    )
    .send()
    .await;
    assert_eq!(call.json()["result"], json!({"content":[{"type":"text","text":"old"}]}));
    let discover = f.server.legacy(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}})).send().await;
    assert_eq!(discover.code(), -32601);
    // Not 404, which to a client holding a session id says the session is gone (it would start
    // over, and again at the next unknown method): the error is in the body, the status 200.
    let session = f.server.legacy_session(json!({})).await;
    for (method, params, code) in
        [("server/discover", json!({}), -32601), ("resources/read", json!({"uri": "test://missing"}), -32002)]
    {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let reply = f.server.legacy(body).header("Mcp-Session-Id", &session).send().await;
        assert_eq!((reply.status, reply.code()), (200, code), "{method}");
    }
    let unknown_response = f.server.legacy(json!({"jsonrpc":"2.0","id":"srv-unknown","result":{}})).send().await;
    assert_eq!(unknown_response.status, 400);
    assert_eq!(f.server.request("GET", "/api/mcp").header("Accept", "text/event-stream").send().await.status, 405);
}

/// A legacy request need not carry `Mcp-Method` or `Mcp-Name`, but when it does (SDKs that speak
/// both revisions send them) they must equal its body, as on the modern path: a header naming
/// one method (or tool) while the body runs another is refused with -32020, not run.
#[tokio::test]
async fn a_legacy_request_whose_headers_disagree_with_its_body_is_refused() {
    let f = fixture().await;
    let call =
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}});
    for (method, name) in [("tools/list", None), ("tools/call", Some("other")), ("=?base64?dG9vbHMvY2FsbA==?=", None)] {
        for version in [None, Some("2025-11-25")] {
            let mut request = f.server.post(call.to_string()).header("Mcp-Method", method);
            if let Some(name) = name {
                request = request.header("Mcp-Name", name);
            }
            if let Some(version) = version {
                request = request.header("MCP-Protocol-Version", version);
            }
            let reply = request.send().await;
            assert_eq!((reply.status, reply.code()), (400, -32020), "{method} {name:?} {version:?}: {}", reply.text());
        }
    }
    let agreeing = f.server.post(call.to_string()).header("Mcp-Method", "tools/call").header("Mcp-Name", "echo");
    assert_eq!(agreeing.send().await.status, 200, "headers that agree are a legacy call");
    assert_eq!(f.server.legacy(call).send().await.status, 200, "and so is one without them");
}

/// A URL elicitation sent to a 2025-11-25 client carries the `elicitationId` that revision
/// requires (2026-07-28 dropped it): without one, the client's schema check refused the request.
#[tokio::test]
async fn a_url_elicitation_to_a_legacy_client_names_itself() {
    use std::sync::Arc;
    use vercel_mcp::protocol::types::InputRequest;
    use vercel_mcp::server::{InputRequired, NoArguments, Outcome, ToolDef};
    let mut server = vercel_mcp::McpServer::new("url", "1");
    server.tool(ToolDef::new("sign_in").description("Asks the user to sign in"), |_, _: NoArguments| async {
        let request = InputRequest::ElicitUrl { message: "Sign in".into(), url: "https://auth.example/x".into() };
        Outcome::<vercel_mcp::protocol::types::CallToolResult>::InputRequired(
            InputRequired::new().request("login", request),
        )
    });
    let parts = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let s = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, parts.endpoint()))).await;
    let session = s.legacy_session(json!({"elicitation": {"url": {}}})).await;
    let call = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sign_in","arguments":{}}});
    let (status, _, mut stream) = s.legacy(call).header("Mcp-Session-Id", &session).open().await;
    assert_eq!(status, 200);
    let request = read_events(&mut stream, 1).await.remove(0);
    assert_eq!(
        (request["method"].as_str(), request["params"]["mode"].as_str()),
        (Some("elicitation/create"), Some("url"))
    );
    assert_eq!(request["params"]["elicitationId"], request["id"], "{request}");
}

/// A 2025 client that did not declare elicitation is never sent an elicitation request: the
/// tool call ends in a tool error saying what is missing, with or without a session id.
#[tokio::test]
async fn a_legacy_client_is_asked_only_for_what_it_declared() {
    let f = fixture().await;
    let without = f.server.legacy_session(json!({"sampling": {}, "elicitation": {"unknown-mode": {}}})).await;
    let ask = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask","arguments":{}}});
    for session in [Some(without.as_str()), None] {
        let mut call = f.server.legacy(ask.clone());
        if let Some(session) = session {
            call = call.header("Mcp-Session-Id", session);
        }
        let reply = call.send().await;
        assert!(reply.header("content-type").unwrap().starts_with("application/json"), "no stream, no request");
        let result = &reply.json()["result"];
        assert_eq!(result["isError"], true, "{}", reply.text());
        assert!(common::error_text(result).contains("elicitation/create"), "{result}");
    }
}

#[tokio::test]
async fn input_required_is_fulfilled_over_the_stream_for_legacy_clients() {
    let f = fixture().await;
    let session = f.server.legacy_session(json!({"elicitation": {}})).await;
    let call = f
        .server
        .legacy(json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ask","arguments":{}}}))
        .header("Mcp-Session-Id", &session);
    let (status, head, mut stream) = call.open().await;
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("text/event-stream"));
    let request = read_events(&mut stream, 1).await.remove(0);
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Name?");
    let id = request["id"].as_str().unwrap().to_owned();
    assert!(id.len() >= 32, "server request ids are unguessable");
    let answer = json!({"jsonrpc":"2.0","id":id,"result":{"action":"accept","content":{"name":"Grace"}}});
    assert_eq!(f.server.legacy(answer.clone()).send().await.status, 202);
    let result = read_events(&mut stream, 1).await.remove(0);
    assert_eq!(result["id"], 9);
    assert_eq!(result["result"]["content"][0]["text"], "hi Grace");
    // The same answer again has nobody waiting for it.
    assert_eq!(f.server.legacy(answer).send().await.status, 400);
}

/// While a 2025 call waits for its client's answer, its stream carries a keep-alive comment
/// every keep-alive period (a person may take a while, and proxies cut a silent stream); and the
/// wait ends (here at its least, 5 s, as the listen limit is shorter) with the call's error,
/// before the function's limit would cut the stream without one.
#[tokio::test]
async fn a_legacy_wait_for_the_client_keeps_its_stream_alive_and_ends() {
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = common::fixture_server(&calls, &Arc::new(tokio::sync::Notify::new()));
    let mut config = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    config.settings.keep_alive = std::time::Duration::from_millis(200);
    config.settings.listen_max_duration = std::time::Duration::from_millis(300);
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, config.endpoint()))).await;
    let session = server.legacy_session(json!({"elicitation": {}})).await;
    let call = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ask","arguments":{}}});
    let started = std::time::Instant::now();
    let (status, _, mut stream) = server.legacy(call).header("Mcp-Session-Id", &session).open().await;
    assert_eq!(status, 200);
    let mut text = String::new();
    let mut chunk = [0u8; 4096];
    while !text.contains("\"id\":9") {
        let read = common::bounded("the call's end", stream.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "the stream ended without the call's answer: {text}");
        text.push_str(&String::from_utf8_lossy(&chunk[..read]));
    }
    let asked = text.find("elicitation/create").expect("the question");
    let beats = text[asked..].matches(": keep-alive").count();
    assert!(beats >= 2, "kept alive while waiting: {text}");
    // One comment a period, not one from each of two timers.
    let periods = started.elapsed().as_millis() / 200;
    assert!(beats as u128 <= periods + 1, "{beats} comments in {periods} periods");
    let answer: Value = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .next_back()
        .unwrap();
    assert_eq!(answer["id"], 9);
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("did not answer elicitation/create in time"),
        "{answer}"
    );
}

/// A 2025 call waiting for its client's answer keeps its stream open as long as a listen stream,
/// and counts against the same per-caller cap: past it, another call that needs an answer is
/// refused with 429 before it asks anything, and so is a listen stream; once the first call is
/// answered, its slot is free again.
#[tokio::test]
async fn a_caller_can_leave_only_its_share_of_questions_unanswered() {
    use std::sync::Arc;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = common::fixture_server(&calls, &Arc::new(tokio::sync::Notify::new()));
    let mut config = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    config.settings.listen_caps = vercel_mcp::server::listen::ListenCaps { per_principal: 1, total: 10 };
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, config.endpoint()))).await;
    let session = server.legacy_session(json!({"elicitation": {}})).await;
    let ask = |id: u32| {
        let call = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"ask","arguments":{}}});
        server.legacy(call).header("Mcp-Session-Id", &session)
    };
    let (status, _, mut first) = ask(1).open().await;
    assert_eq!(status, 200);
    let question = read_events(&mut first, 1).await.remove(0);
    assert_eq!(question["method"], "elicitation/create");

    let refused = ask(2).send().await;
    assert_eq!((refused.status, refused.code()), (429, -32600), "{}", refused.text());
    let message = refused.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("calls waiting for your answer") && message.contains("caller (limit 1)"), "{message}");
    assert!(!refused.text().contains("elicitation/create"), "nothing was asked: {}", refused.text());
    let listen = json!({"notifications": {"toolsListChanged": true}});
    let (status, _, _) = server.modern(json!(3), "subscriptions/listen", listen.clone()).open().await;
    assert_eq!(status, 429, "a listen stream shares the cap");

    let answer = json!({"jsonrpc":"2.0","id":question["id"],"result":{"action":"accept","content":{"name":"Ada"}}});
    let answered = server.legacy(answer).send().await;
    assert_eq!(answered.status, 202);
    assert_eq!(read_events(&mut first, 1).await.remove(0)["result"]["content"][0]["text"], "hi Ada");
    let (status, _, mut again) = ask(4).open().await;
    assert_eq!(status, 200, "the answered call gave its slot back");
    assert_eq!(read_events(&mut again, 1).await.remove(0)["method"], "elicitation/create");
}

/// A round that asks nothing (it hands back only its state) runs on at once, so the call waits
/// for no answer and holds no listen slot: a caller at its cap still gets the result.
#[tokio::test]
async fn a_round_that_asks_nothing_needs_no_listen_slot() {
    use std::sync::Arc;
    use vercel_mcp::protocol::types::CallToolResult;
    use vercel_mcp::server::{InputRequired, NoArguments, Outcome, ToolDef};
    let mut server = vercel_mcp::McpServer::new("t", "1");
    server.tool(
        ToolDef::new("two_steps").description("Hands back its state once, then answers"),
        |ctx, _: NoArguments| async move {
            match ctx.request_state() {
                Some(_) => Outcome::Complete(CallToolResult::text("second step")),
                None => Outcome::InputRequired(InputRequired::new().state(json!({"step": 1}))),
            }
        },
    );
    let mut config = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    config.settings.listen_caps = vercel_mcp::server::listen::ListenCaps { per_principal: 1, total: 10 };
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, config.endpoint()))).await;
    let listen = json!({"notifications": {"toolsListChanged": true}});
    let (status, _, mut held) = server.modern(json!(1), "subscriptions/listen", listen).open().await;
    assert_eq!(status, 200);
    read_events(&mut held, 1).await;
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"two_steps","arguments":{}}});
    let reply = server.legacy(call).send().await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["result"]["content"][0]["text"], "second step", "{}", reply.text());
}

/// The legacy path with authentication on: the route and tool scopes hold as on the modern path
/// (a listing shows only what the token allows, a call without the scope gets 403), and a
/// pending server-to-client request can be answered only by the principal whose call asked.
#[tokio::test]
async fn legacy_calls_with_authentication_are_scoped_and_answered_only_by_their_caller() {
    use common::tokens::{auth_config, bearer, stub_jwks};
    let (jwks, _) = stub_jwks().await;
    let config = auth_config(jwks, &[("MCP_AUTH_MODE", "required")]);
    let server = common::TestServer::start(common::everything_app(&config)).await;
    let (reader, alice, bob) =
        (bearer("reader", "mcp:read"), bearer("alice", "mcp:read mcp:write"), bearer("bob", "mcp:read mcp:write"));
    let post = |who: &str, body: Value| server.legacy(body).header("Authorization", who);
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize",
        "params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"c","version":"1"}}});
    let session = post(&alice, init).send().await.header("mcp-session-id").unwrap().to_owned();

    let list = post(&reader, json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}})).send().await.json();
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"get_job_status") && !names.contains(&"book_meeting"), "filtered by scope: {names:?}");
    let book = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"book_meeting","arguments":{"topic":"Q3"}}});
    let refused = post(&reader, book.clone()).header("Mcp-Session-Id", &session).send().await;
    assert_eq!(refused.status, 403, "{}", refused.text());

    let (status, _, mut stream) = post(&alice, book).header("Mcp-Session-Id", &session).open().await;
    assert_eq!(status, 200);
    let asked = read_events(&mut stream, 1).await.remove(0);
    assert_eq!(asked["method"], "elicitation/create");
    let answer = json!({"jsonrpc":"2.0","id":asked["id"],"result":{"action":"accept","content":{"approved":true}}});
    assert_eq!(post(&bob, answer.clone()).send().await.status, 400, "another principal cannot answer alice's request");
    assert_eq!(post(&alice, answer).send().await.status, 202, "alice can, and her call was still waiting");
    let done = read_events(&mut stream, 1).await.remove(0);
    assert!(done["result"]["content"][0]["text"].as_str().unwrap().starts_with("Booked:"), "{done}");
}

/// A 2025 client that closes its call's stream cancels the call: the handler is dropped, as on
/// the modern path.
#[tokio::test]
async fn closing_a_legacy_stream_cancels_the_handler() {
    let f = fixture().await;
    let body = json!({"jsonrpc":"2.0","id":4,"method":"tools/call",
        "params":{"name":"wait","arguments":{},"_meta":{"progressToken":"p1"}}});
    let (status, head, mut stream) = f.server.legacy(body).open().await;
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("text/event-stream"), "{head}");
    assert_eq!(read_events(&mut stream, 1).await[0]["params"]["progressToken"], "p1");
    let cancelled = f.cancelled.notified();
    drop(stream);
    common::bounded("the legacy handler to be dropped", cancelled).await;
}

/// A 2025 call's `progressToken` longer than the cap is ignored, as that path ignores any token
/// it does not honour: the call runs and answers, without progress notifications (each would
/// repeat the token). One at the cap gets them.
#[tokio::test]
async fn a_legacy_progress_token_over_the_cap_runs_without_progress() {
    use std::sync::Arc;
    use vercel_mcp::protocol::meta::MAX_PROGRESS_TOKEN_BYTES;
    use vercel_mcp::protocol::types::CallToolResult;
    use vercel_mcp::server::{McpServer, NoArguments, ToolDef};
    let mut server = McpServer::new("steps", "1");
    server.tool(ToolDef::new("steps").description("Reports two steps"), |ctx, _: NoArguments| async move {
        ctx.progress(1.0, Some(2.0), None).await;
        ctx.progress(2.0, Some(2.0), None).await;
        CallToolResult::text("done")
    });
    let parts = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, parts.endpoint()))).await;
    for (token, notified) in [("p".repeat(MAX_PROGRESS_TOKEN_BYTES), 2), ("p".repeat(MAX_PROGRESS_TOKEN_BYTES + 1), 0)]
    {
        let body = json!({"jsonrpc":"2.0","id":5,"method":"tools/call",
            "params":{"name":"steps","arguments":{},"_meta":{"progressToken":token}}});
        let reply = server.legacy(body).send().await;
        assert_eq!(reply.status, 200);
        let messages: Vec<Value> = match reply.events() {
            events if events.is_empty() => vec![reply.json()],
            events => events,
        };
        let (progress, answers): (Vec<&Value>, Vec<&Value>) =
            messages.iter().partition(|m| m["method"] == "notifications/progress");
        assert_eq!(progress.len(), notified, "a {}-byte token: {messages:?}", token.len());
        assert!(progress.iter().all(|m| m["params"]["progressToken"] == token.as_str()));
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0]["result"]["content"][0]["text"], "done", "the call ran: {messages:?}");
    }
}
