//! Structured logs: one JSON line per request with hashed identifiers, lifecycle events for
//! jobs, contained panics with correlation ids, and no secret reaching any line.

use crate::common;

use common::TestServer;
use common::tokens::{auth_config, bearer, stub_jwks, token};
use serde_json::{Value, json};
use std::sync::Arc;

use vercel_mcp::observe::MemorySink;
use vercel_mcp::protocol::types::{CallToolResult, InputRequest};
use vercel_mcp::server::{InputRequired, NoArguments, Outcome, ToolDef, ToolError};
use vercel_mcp::{App, McpServer};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Secretive {
    secret: String,
}

struct Env {
    server: TestServer,
    logs: Arc<MemorySink>,
    logger: vercel_mcp::observe::Logger,
    queue: vercel_mcp::jobs::LocalQueue,
}

async fn env() -> Env {
    env_with(&[]).await
}

async fn env_with(vars: &[(&str, &str)]) -> Env {
    env_limited(vars, vercel_mcp::settings::ConnectionLimits::default()).await
}

async fn env_limited(vars: &[(&str, &str)], limits: vercel_mcp::settings::ConnectionLimits) -> Env {
    let (jwks, _) = stub_jwks().await;
    let mut config = auth_config(jwks, &[&[("MCP_AUTH_MODE", "optional")], vars].concat());
    let logs = Arc::new(MemorySink::default());
    config.log_sink = logs.clone();
    config.settings.job_step_delay = std::time::Duration::ZERO;
    let mut server = McpServer::new("observed", "1");
    vercel_mcp::configure_server(&mut server, &config);
    vercel_mcp::catalogue::resources::register(&mut server);
    server.tool(ToolDef::new("boom").description("Panics with its argument"), |_, args: Secretive| async move {
        if !args.secret.is_empty() {
            panic!("the secret was {}", args.secret);
        }
        CallToolResult::text("unreachable")
    });
    server.tool(ToolDef::new("fail").description("Fails naming its argument"), |_, args: Secretive| async move {
        Err::<CallToolResult, _>(ToolError::Execution(format!("could not use {}", args.secret)))
    });
    server.tool(
        ToolDef::new("looks_failed").description("Succeeds with output shaped like an error"),
        |_, _: NoArguments| async move { CallToolResult::structured(json!({"isError": true, "error": {"code": -1}})) },
    );
    server.tool(
        ToolDef::new("told_then_fail").description("Reports progress, then fails"),
        |ctx, _: NoArguments| async move {
            ctx.progress(1.0, Some(2.0), None).await;
            Err::<CallToolResult, _>(ToolError::Execution("failed after progress".into()))
        },
    );
    server.tool(ToolDef::new("ask").description("MRTR with state"), |ctx, args: Secretive| async move {
        if ctx.request_state().is_some() {
            return Outcome::Complete(CallToolResult::text("done"));
        }
        let request = InputRequest::ElicitForm {
            message: "ok?".into(),
            requested_schema: json!({"type": "object", "properties": {}}),
        };
        Outcome::InputRequired(InputRequired::new().request("ok", request).state(json!({ "kept": args.secret })))
    });
    let _ = NoArguments {};
    let logger = config.logger();
    let queue = config.jobs.local_queue.clone().unwrap();
    let routes = vercel_mcp::local::Routes::with_mcp(Arc::new(App::new(server, config.endpoint())))
        .with_jobs(&config)
        .with_limits(limits);
    Env { server: TestServer::start_routes(routes).await, logs, logger, queue }
}

fn request_line<'a>(lines: &'a [Value], request_id: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["event"] == "request" && l["requestId"] == request_id)
        .unwrap_or_else(|| panic!("no line for {request_id}"))
}

#[tokio::test]
async fn one_line_per_request_with_hashed_identity_and_trace() {
    let env = env().await;
    let reply = env
        .server
        .modern(json!(1), "tools/call", json!({"name": "echo", "arguments": {"message": "hi"}}))
        .header("Authorization", &bearer("alice", "mcp:read"))
        .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .send()
        .await;
    let id = reply.header("x-mcp-request-id").expect("a request id").to_owned();
    let lines = env.logs.lines();
    let line = request_line(&lines, &id);
    assert_eq!(line["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        (line["method"].clone(), line["name"].clone(), line["era"].clone()),
        (json!("tools/call"), json!("echo"), json!("modern"))
    );
    assert_eq!(line["outcome"], "ok");
    assert_eq!(line["principal"], env.logger.digest("principal", b"sub:alice").as_str());
    assert!(line["arguments"].as_str().unwrap().len() == 16);
    assert!(line["latencyMs"].as_f64().is_some() && line["ts"].as_str().unwrap().ends_with('Z'));
    // The fields the README lists, and no other.
    let mut fields: Vec<&str> = line.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "arguments",
            "code",
            "era",
            "event",
            "latencyMs",
            "level",
            "method",
            "name",
            "outcome",
            "principal",
            "requestId",
            "status",
            "stream",
            "traceId",
            "ts"
        ]
    );

    let meta_trace = json!({"name": "echo", "arguments": {"message": "x"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}});
    let reply = env.server.modern(json!(2), "tools/call", meta_trace).send().await;
    let lines = env.logs.lines();
    let line = request_line(&lines, reply.header("x-mcp-request-id").unwrap());
    assert_eq!(line["traceId"], "0af7651916cd43dd8448eb211c80319c", "_meta trace context is the fallback");
    assert_eq!(line["principal"], env.logger.digest("principal", b"anonymous").as_str());

    let fresh = env.server.modern(json!(3), "tools/list", json!({})).send().await;
    let lines = env.logs.lines();
    assert_eq!(request_line(&lines, fresh.header("x-mcp-request-id").unwrap())["traceId"].as_str().unwrap().len(), 32);

    // Both, disagreeing: the header is trusted and an operator is told; agreeing, nothing is said.
    let mismatches = || env.logs.lines().into_iter().filter(|l| l["event"] == "trace.mismatch").collect::<Vec<_>>();
    assert!(mismatches().is_empty(), "{:?}", mismatches());
    let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for (id, meta_trace) in [(4, "0af7651916cd43dd8448eb211c80319c"), (5, "4bf92f3577b34da6a3ce929d0e0e4736")] {
        let params = json!({"name": "echo", "arguments": {"message": "x"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "traceparent": format!("00-{meta_trace}-b7ad6b7169203331-01")}});
        let reply = env.server.modern(json!(id), "tools/call", params).header("traceparent", header).send().await;
        let request_id = reply.header("x-mcp-request-id").unwrap().to_owned();
        assert_eq!(request_line(&env.logs.lines(), &request_id)["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        let told: Vec<Value> = mismatches().into_iter().filter(|l| l["requestId"] == request_id.as_str()).collect();
        assert_eq!((told.len(), id), (usize::from(id == 4), id), "{told:?}");
    }
    assert_eq!(mismatches()[0]["level"], "warn");
    // Any caller can send both: the line is written once a minute at most.
    for id in 6..16 {
        let params = json!({"name": "echo", "arguments": {"message": "x"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}});
        env.server.modern(json!(id), "tools/call", params).header("traceparent", header).send().await;
    }
    assert_eq!(mismatches().len(), 1, "{:?}", mismatches());
}

/// `MCP_REQUEST_LOG=failures`: a request that succeeded leaves no line; every kind of failure the
/// endpoint answers still does, and so does a stream (its line is written before its outcome is
/// known); job and panic events are written as before.
#[tokio::test]
async fn failures_only_logs_failures_and_streams() {
    let env = env_with(&[("MCP_REQUEST_LOG", "failures")]).await;
    let id = |reply: &common::Reply| reply.header("x-mcp-request-id").expect("a request id").to_owned();
    let logged = |id: &str| env.logs.lines().iter().any(|l| l["event"] == "request" && l["requestId"] == id);

    let echo = env.server.modern(json!(1), "tools/call", json!({"name": "echo", "arguments": {"message": "hi"}}));
    let succeeded = echo.send().await;
    assert_eq!(succeeded.status, 200);
    assert!(!logged(&id(&succeeded)), "a success has no line");
    let submitted = env
        .server
        .modern(json!(2), "tools/call", json!({"name": "submit_job", "arguments": {"steps": 1}}))
        .header("Authorization", &bearer("alice", "mcp:read mcp:write"))
        .send()
        .await;
    assert!(submitted.text().contains("jobId"), "{}", submitted.text());
    assert!(!logged(&id(&submitted)));
    assert!(env.logs.lines().iter().any(|l| l["event"] == "job.submit"), "job events are still written");

    let failures = [
        (
            env.server.modern(json!(3), "tools/call", json!({"name": "fail", "arguments": {"secret": "x"}})),
            "tool_error",
        ),
        (env.server.modern(json!(4), "tools/call", json!({"name": "nope", "arguments": {}})), "protocol_error"),
        (
            env.server.modern(json!(5), "tools/list", json!({})).header("Authorization", "Bearer nonsense"),
            "auth_failure",
        ),
        (env.server.post("{"), "protocol_error"),
        (
            env.server.modern(json!(6), "tools/call", json!({"name": "boom", "arguments": {"secret": "x"}})),
            "protocol_error",
        ),
        (
            env.server.modern(json!(7), "tools/list", json!({})).header("Origin", "https://evil.example"),
            "protocol_error",
        ),
        (env.server.request("GET", "/api/mcp"), "protocol_error"),
    ];
    for (call, outcome) in failures {
        let reply = call.send().await;
        let lines = env.logs.lines();
        assert_eq!(request_line(&lines, &id(&reply))["outcome"], outcome);
    }
    assert!(env.logs.lines().iter().any(|l| l["event"] == "panic"), "the panic has its event too");

    let mut params = json!({"name": "told_then_fail", "arguments": {}});
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "p"});
    let streamed = env.server.modern(json!(8), "tools/call", params).send().await;
    assert_eq!(streamed.header("content-type"), Some("text/event-stream"), "{}", streamed.text());
    let lines = env.logs.lines();
    let line = request_line(&lines, &id(&streamed));
    assert_eq!((line["stream"].clone(), line["outcome"].clone()), (json!(true), json!("ok")), "{line}");
}

/// Sends `raw` on a connection of its own and reads the answer until the server closes it.
async fn exchange(server: &TestServer, raw: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    common::bounded("the answer", stream.read_to_end(&mut out)).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The request id an answer read off the wire carries.
fn wire_request_id(answer: &str) -> &str {
    answer
        .lines()
        .find_map(|l| l.strip_prefix("x-mcp-request-id: "))
        .unwrap_or_else(|| panic!("no request id in {answer}"))
        .trim()
}

/// What the local run refuses before the endpoint runs (a path with no route, a body declared
/// over the limit, one that breaks, one that comes too slowly) still gets its request line,
/// under either setting of `MCP_REQUEST_LOG`, with the request id the answer carries.
#[tokio::test]
async fn refusals_before_the_endpoint_have_a_line() {
    for setting in ["all", "failures"] {
        let limits = vercel_mcp::settings::ConnectionLimits {
            // Long enough that the broken body, sent with its head, is read before it.
            body_timeout: std::time::Duration::from_secs(1),
            ..Default::default()
        };
        let env = env_limited(&[("MCP_REQUEST_LOG", setting)], limits).await;
        let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let head = |extra: &str| {
            format!(
                "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\ntraceparent: {traced}\r\n{extra}Connection: close\r\n\r\n"
            )
        };
        let cases: [(String, u16); 3] = [
            (head("Content-Length: 100000000\r\n"), 413),
            (head("Transfer-Encoding: chunked\r\n") + "zz\r\n{}\r\n", 400),
            (head("Content-Length: 100\r\n") + "{\"jsonrpc\"", 408),
        ];
        let request_lines = || env.logs.lines().iter().filter(|l| l["event"] == "request").count();
        for (raw, status) in cases {
            let before = request_lines();
            let answer = exchange(&env.server, raw.as_bytes()).await;
            assert_eq!(request_lines(), before + 1, "{setting}: one line for {status}");
            assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{setting}: {answer}");
            let lines = env.logs.lines();
            let line = request_line(&lines, wire_request_id(&answer));
            assert_eq!(line["status"], status, "{setting}: {line}");
            assert_eq!(line["outcome"], "protocol_error", "{line}");
            assert_eq!(line["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736", "{line}");
            if status == 408 {
                // Counted from when the wait for the body began, not from the refusal.
                assert!(line["latencyMs"].as_f64().unwrap() >= 1000.0, "{line}");
            }
            assert_eq!((line["method"].clone(), line["principal"].clone()), (Value::Null, Value::Null), "{line}");
        }
        // No traceparent: the line has a trace id of its own.
        let missing = env.server.request("POST", "/api/nowhere").send().await;
        assert_eq!(missing.status, 404);
        let lines = env.logs.lines();
        let line = request_line(&lines, missing.header("x-mcp-request-id").expect("a request id"));
        assert_eq!((line["status"].clone(), line["level"].clone()), (json!(404), json!("info")), "{line}");
        let trace = line["traceId"].as_str().unwrap();
        assert!(trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit()) && trace != "0".repeat(32), "{line}");
    }
}

/// A 2025-11-25 request (no session: the tools need none).
fn legacy(env: &Env, method: &str, params: Value) -> common::Call {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    env.server.legacy(body)
}

#[tokio::test]
async fn outcomes_are_classified() {
    let env = env().await;
    let cases = [
        (
            env.server.modern(json!(1), "tools/call", json!({"name": "fail", "arguments": {"secret": "x"}})),
            "tool_error",
            None,
        ),
        // Arguments the schema refuses never reach the handler: a tool error for the client,
        // told apart in the line.
        (
            env.server.modern(json!(1), "tools/call", json!({"name": "fail", "arguments": {"secret": 42}})),
            "invalid_arguments",
            None,
        ),
        (
            env.server.modern(json!(1), "tools/call", json!({"name": "nope", "arguments": {}})),
            "protocol_error",
            Some(-32602),
        ),
        (env.server.modern(json!(1), "nope/nothing", json!({})), "protocol_error", Some(-32601)),
        (
            env.server.modern(json!(1), "tools/list", json!({})).header("Authorization", "Bearer nonsense"),
            "auth_failure",
            None,
        ),
        // A credential without the tool's scope (403) is a failure; no credential at all (401
        // without an error code) is how a client learns it needs one.
        (
            env.server
                .modern(json!(1), "tools/call", json!({"name": "submit_job", "arguments": {"steps": 1}}))
                .header("Authorization", &bearer("alice", "mcp:read")),
            "auth_failure",
            None,
        ),
        (
            env.server.modern(json!(1), "tools/call", json!({"name": "submit_job", "arguments": {"steps": 1}})),
            "auth_required",
            None,
        ),
        // A token that was good until it expired: its holder refreshes it, routine too.
        (
            env.server.modern(json!(1), "tools/list", json!({})).header(
                "Authorization",
                &format!("Bearer {}", token(json!({"exp": common::tokens::NOW - 1, "iat": common::tokens::NOW - 100}))),
            ),
            "token_expired",
            None,
        ),
        // The outcome is what the handler returned, not what its output looks like.
        (env.server.modern(json!(1), "tools/call", json!({"name": "looks_failed", "arguments": {}})), "ok", None),
        // The legacy path classifies the same way.
        (legacy(&env, "tools/call", json!({"name": "fail", "arguments": {"secret": "x"}})), "tool_error", None),
        (legacy(&env, "tools/call", json!({"name": "fail", "arguments": {}})), "invalid_arguments", None),
        (legacy(&env, "tools/call", json!({"name": "nope", "arguments": {}})), "protocol_error", Some(-32602)),
        (legacy(&env, "tools/call", json!({"name": "looks_failed", "arguments": {}})), "ok", None),
    ];
    for (call, outcome, code) in cases {
        let reply = call.send().await;
        let lines = env.logs.lines();
        let line = request_line(&lines, reply.header("x-mcp-request-id").unwrap());
        assert_eq!(line["outcome"], outcome, "{line}");
        let status = reply.status;
        match outcome {
            "auth_failure" => assert!(status == 401 || status == 403, "{status}"),
            "auth_required" | "token_expired" => assert_eq!(status, 401),
            _ => {}
        }
        assert_eq!(line["code"].as_i64(), code);
        // A refusal of the caller's credential or arguments is a warning, worth an alert in a run.
        let level = if matches!(outcome, "auth_failure" | "invalid_arguments") { "warn" } else { "info" };
        assert_eq!(line["level"], level, "{line}");
        if outcome == "invalid_arguments" {
            let text = reply.text();
            assert!(text.contains("isError") && text.contains("Invalid arguments for tool fail"), "{text}");
        }
    }
    // A method the server does not know is logged as it was sent.
    let reply = env.server.modern(json!(9), "nope/nothing", json!({})).send().await;
    let lines = env.logs.lines();
    assert_eq!(request_line(&lines, reply.header("x-mcp-request-id").unwrap())["method"], "nope/nothing");
    // ...with what would pass for a line end, or turn the line around on a terminal, escaped.
    let reply = legacy(&env, "tools/call", json!({"name": "a\u{2028}b\u{202e}c\nd", "arguments": {}})).send().await;
    let lines = env.logs.lines();
    let line = request_line(&lines, reply.header("x-mcp-request-id").unwrap());
    assert_eq!(line["name"], "a\\u{2028}b\\u{202e}c\\nd");
    let raw = env.logs.raw().join("\n");
    assert!(!raw.contains(['\u{2028}', '\u{202e}']), "no raw separator or override in any line");
}

#[tokio::test]
async fn a_panic_is_contained_with_a_correlation_id() {
    let env = env().await;
    let reply = env
        .server
        .modern(json!(7), "tools/call", json!({"name": "boom", "arguments": {"secret": "canary-panic-7f3a"}}))
        .send()
        .await;
    let id = reply.header("x-mcp-request-id").unwrap().to_owned();
    assert_eq!(reply.code(), -32603);
    assert_eq!(reply.json()["error"]["data"]["correlationId"], id);
    let lines = env.logs.lines();
    let panic = lines.iter().find(|l| l["event"] == "panic").expect("a panic event");
    assert_eq!(panic["requestId"], id);
    assert!(panic["location"].as_str().unwrap().contains("tests/it/observability.rs"));
    assert_eq!(request_line(&lines, &id)["level"], "error");
    let next = env
        .server
        .modern(json!(8), "tools/call", json!({"name": "echo", "arguments": {"message": "still here"}}))
        .send()
        .await;
    assert_eq!(next.json()["result"]["content"][0]["text"], "still here");
    // Streamed (a progress token): the work around the handler is contained too, and the
    // handler's panic is logged once, by its own containment.
    let mut params = json!({"name": "boom", "arguments": {"secret": "canary-panic-8e1b"}});
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "p"});
    let streamed = env.server.modern(json!(9), "tools/call", params).send().await;
    let id = streamed.header("x-mcp-request-id").unwrap().to_owned();
    assert_eq!(
        (streamed.code(), streamed.json()["error"]["data"]["correlationId"].as_str()),
        (-32603, Some(id.as_str()))
    );
    let panics = env.logs.lines().into_iter().filter(|l| l["event"] == "panic" && l["requestId"] == id).count();
    assert_eq!(panics, 1, "one panic line for the request");
}

/// A resource read names the resource, not the URI read through a template: that URI carries
/// the caller's argument, so it is digested like a tool's arguments. A URI nothing serves is
/// named by nothing.
#[tokio::test]
async fn a_resource_read_through_a_template_is_logged_as_its_template() {
    let env = env().await;
    let canary = "notes://canary-topic-93d1";
    let mut names = Vec::new();
    for uri in ["notes://welcome", canary, "elsewhere://canary-topic-93d1"] {
        let reply = env.server.modern(json!(1), "resources/read", json!({ "uri": uri })).send().await;
        let id = reply.header("x-mcp-request-id").unwrap().to_owned();
        let lines = env.logs.lines();
        let line = request_line(&lines, &id);
        assert_eq!(line["arguments"], env.logger.digest_json("uri", &json!(uri)).as_str(), "{uri}");
        names.push(line["name"].clone());
    }
    assert_eq!(names, [json!("notes://welcome"), json!("notes://{topic}"), Value::Null]);
    assert!(!env.logs.raw().join("\n").contains("canary-topic-93d1"), "no log line carries the URI's argument");
}

#[tokio::test]
async fn no_secret_reaches_any_log_line() {
    let env = env().await;
    let valid_token = token(json!({"sub": "alice", "scope": "mcp:read mcp:write"}));
    let canaries = [
        "canary-arg-51c2",
        "canary-header-9d0e",
        "canary-meta-44b1",
        "canary-error-12aa",
        "canary-panic-7f3a",
        "canary-state-6e6e",
        "canary-bad-token-0c0c",
    ];
    let auth = format!("Bearer {valid_token}");
    let s = &env.server;
    s.modern(json!(1), "tools/call", json!({"name": "echo", "arguments": {"message": canaries[0]}}))
        .header("Authorization", &auth)
        .header("X-Debug", canaries[1])
        .send()
        .await;
    let meta = json!({"name": "echo", "arguments": {"message": "m"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": canaries[2], "version": "1"}, "progressToken": canaries[2]}});
    s.modern(json!(2), "tools/call", meta).header("Authorization", &auth).send().await;
    s.modern(json!(3), "tools/call", json!({"name": "fail", "arguments": {"secret": canaries[3]}}))
        .header("Authorization", &auth)
        .send()
        .await;
    s.modern(json!(4), "tools/call", json!({"name": "boom", "arguments": {"secret": canaries[4]}}))
        .header("Authorization", &auth)
        .send()
        .await;
    let mut ask = json!({"name": "ask", "arguments": {"secret": canaries[5]}});
    ask["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let first = s.modern(json!(5), "tools/call", ask.clone()).header("Authorization", &auth).send().await.json();
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    ask["requestState"] = json!(state);
    ask["inputResponses"] = json!({"ok": {"action": "accept"}});
    s.modern(json!(6), "tools/call", ask).header("Authorization", &auth).send().await;
    s.modern(json!(7), "tools/list", json!({}))
        .header("Authorization", &format!("Bearer {}", canaries[6]))
        .send()
        .await;
    let submitted = s
        .modern(json!(8), "tools/call", json!({"name": "submit_job", "arguments": {"steps": 2}}))
        .header("Authorization", &auth)
        .send()
        .await
        .json();
    let handle = common::payload(&submitted["result"])["jobId"].as_str().unwrap().to_owned();
    s.modern(json!(9), "tools/call", json!({"name": "get_job_status", "arguments": {"jobId": handle}}))
        .header("Authorization", &auth)
        .send()
        .await;
    env.queue.drain().await;
    s.modern(json!(10), "tools/call", json!({"name": "cancel_job", "arguments": {"jobId": handle}}))
        .header("Authorization", &auth)
        .send()
        .await;

    let raw = env.logs.raw().join("\n");
    for secret in canaries.iter().copied().chain([valid_token.as_str(), state.as_str(), handle.as_str(), "alice"]) {
        assert!(!raw.contains(secret), "a log line contains {secret:.24}");
    }
    let lines = env.logs.lines();
    let events: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
    for expected in
        ["request", "panic", "job.submit", "job.retrieve", "job.progress", "job.finish", "job.run", "job.cancel"]
    {
        assert!(events.contains(&expected), "missing {expected} event");
    }
    let submit = lines.iter().find(|l| l["event"] == "job.submit").unwrap();
    let retrieve = lines.iter().find(|l| l["event"] == "job.retrieve").unwrap();
    assert_eq!(submit["job"], retrieve["job"], "job events correlate through a digest of the job id");
    // Every job event names the job and its owner, the delivery's included: start, progress,
    // completion and retrieval each join to the request that submitted the job.
    for line in lines.iter().filter(|l| l["event"].as_str().is_some_and(|e| e.starts_with("job.") && e != "job.fault"))
    {
        assert_eq!((&line["job"], &line["principal"]), (&submit["job"], &submit["principal"]), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_never_mix_principals() {
    let env = Arc::new(env().await);
    let calls = (0..24).map(|i| {
        let env = env.clone();
        tokio::spawn(async move {
            let sub = if i % 2 == 0 { "alice" } else { "bob" };
            let reply = env
                .server
                .modern(json!(i), "tools/call", json!({"name": "echo", "arguments": {"message": "m"}}))
                .header("Authorization", &bearer(sub, "mcp:read"))
                .send()
                .await;
            (sub, reply.header("x-mcp-request-id").unwrap().to_owned())
        })
    });
    let mut results = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        results.push(call.await.unwrap());
    }
    let lines = env.logs.lines();
    for (sub, id) in results {
        let expected = env.logger.digest("principal", format!("sub:{sub}").as_bytes());
        assert_eq!(
            request_line(&lines, &id)["principal"],
            expected.as_str(),
            "request {id} logged the wrong principal"
        );
    }
}

/// On Vercel each request's lines go to the runtime's channel for that request
/// (`observe::with_request_sink`, which `vercel::serve` puts around the handling). A streaming
/// handler runs inside that scope until the response head is ready, so what it logs by then is its
/// request's. After the head it is polled by the body, outside the scope: `vercel_runtime` may
/// already have sent the invocation's `end`, so those lines go to the process's sink (standard
/// error), untagged, as a job's do.
#[tokio::test]
async fn a_streaming_handler_logs_with_its_request_until_its_head_is_sent_and_to_the_process_after() {
    let (jwks, _) = stub_jwks().await;
    let mut config = auth_config(jwks, &[("MCP_AUTH_MODE", "optional")]);
    let process_lines = Arc::new(MemorySink::default());
    config.log_sink = process_lines.clone();
    let logger = config.logger();
    let mut server = McpServer::new("observed", "1");
    server.tool(
        ToolDef::new("narrate").description("Logs, reports progress, logs again"),
        move |ctx, _: NoArguments| {
            let logger = logger.clone();
            async move {
                logger.event("info", "narrated", json!({ "step": 1 }));
                ctx.progress(1.0, Some(2.0), Some("started")).await;
                // Pending once: the response head goes out with the first event, and the rest of
                // this handler runs from the body.
                tokio::task::yield_now().await;
                logger.event("info", "narrated", json!({ "step": 2 }));
                ctx.progress(2.0, Some(2.0), None).await;
                CallToolResult::text("told")
            }
        },
    );
    let app = Arc::new(App::new(server, config.endpoint()));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "narrate", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "p"}}});
    let request = http::Request::post("/api/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "narrate")
        .body(bytes::Bytes::from(body.to_string()))
        .unwrap();
    let request_lines = Arc::new(MemorySink::default());
    let sink: Arc<dyn vercel_mcp::observe::LogSink> = request_lines.clone();
    let response = vercel_mcp::observe::with_request_sink(sink, vercel_mcp::transport::handle(&app, request)).await;
    assert!(response.body().is_stream(), "a progress token and a notification make a stream");
    // Read outside the scope, as hyper does.
    let streamed = String::from_utf8(response.into_body().collect().await.to_vec()).unwrap();
    assert!(streamed.contains("\"progress\":2.0") && streamed.contains("told"), "{streamed}");
    let steps = |sink: &MemorySink| -> Vec<Value> {
        sink.lines().into_iter().filter(|l| l["event"] == "narrated").map(|l| l["step"].clone()).collect()
    };
    assert_eq!(steps(&request_lines), [json!(1)], "before the head: the request's");
    assert_eq!(steps(&process_lines), [json!(2)], "after it: the process's");
    let request_line = request_lines.lines().into_iter().find(|l| l["event"] == "request").expect("the request line");
    assert_eq!(request_line["stream"], true);
}
