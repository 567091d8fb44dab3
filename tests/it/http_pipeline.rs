//! The request pipeline over real loopback HTTP: every row of the error table, SSE framing,
//! cancellation, MRTR sealing, subscriptions and pagination.

use crate::common;

use common::{fixture, read_events, with_meta};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use vercel_mcp::protocol::types::{CallToolResult, Resource, ResourceContents};
use vercel_mcp::server::{NoArguments, ToolDef};
use vercel_mcp::state::{ChangeEvent, ManualClock};
use vercel_mcp::{App, Parts};

/// `params` with the `_meta` of a client that declares elicitation.
fn eliciting(params: Value) -> Value {
    common::with_capabilities(params, json!({"elicitation": {}}))
}

fn call(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

#[tokio::test]
async fn get_and_delete_are_405_with_allow() {
    let f = fixture().await;
    for method in ["GET", "DELETE", "PUT"] {
        let reply = f.server.request(method, "/api/mcp").send().await;
        assert_eq!(reply.status, 405, "{method}");
        assert_eq!(reply.header("allow"), Some("POST, OPTIONS"));
    }
}

#[tokio::test]
async fn disallowed_origins_get_a_plain_403_that_echoes_nothing() {
    let f = fixture().await;
    for origin in ["https://evil.example", "null", "http://localhost:3000.evil.example", "not a url"] {
        let reply = f.server.modern(json!(1), "tools/list", json!({})).header("Origin", origin).send().await;
        assert_eq!(reply.status, 403, "{origin}");
        assert!(reply.header("content-type").unwrap().starts_with("text/plain"));
        assert_eq!(reply.text(), "Forbidden: Origin not allowed");
    }
    let allowed =
        f.server.modern(json!(1), "tools/list", json!({})).header("Origin", "http://LOCALHOST:3000/").send().await;
    assert_eq!(allowed.status, 200);
    assert_eq!(f.server.modern(json!(1), "tools/list", json!({})).send().await.status, 200, "no Origin passes");
}

/// A malformed body is 400; its error carries the request's id when one could be read (the spec
/// lets an error omit it only when it could not), and no id otherwise.
#[tokio::test]
async fn malformed_bodies_are_400_with_the_id_only_when_it_was_readable() {
    let f = fixture().await;
    let cases = [
        ("{not json", -32700, None),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#, -32600, None),
        (r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#, -32600, None),
        (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#, -32600, None),
        (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, -32600, None),
        (r#"{"id":1,"method":"tools/list"}"#, -32600, Some(json!(1))),
        (r#"{"jsonrpc":"1.0","id":"a","method":"tools/list"}"#, -32600, Some(json!("a"))),
        (r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[1]}"#, -32600, Some(json!(7))),
        (r#"{"jsonrpc":"2.0","id":"x","method":7}"#, -32600, Some(json!("x"))),
        // A request missing its method: neither a request nor a response, and its id is readable.
        (r#"{"jsonrpc":"2.0","id":7}"#, -32600, Some(json!(7))),
        (r#"{"jsonrpc":"2.0","id":"q","params":{}}"#, -32600, Some(json!("q"))),
        (r#"{"id":8}"#, -32600, Some(json!(8))),
        (r#"{"jsonrpc":"2.0","id":9,"result":{},"error":{}}"#, -32600, None),
    ];
    for (body, code, id) in cases {
        let reply = f.server.post(body).header("MCP-Protocol-Version", "2026-07-28").send().await;
        assert_eq!((reply.status, reply.code()), (400, code), "{body}");
        assert_eq!(reply.json().get("id"), id.as_ref(), "{body}");
    }
    let wrong_type = f.server.post("{}").replace("Content-Type", "text/plain").send().await;
    assert_eq!(wrong_type.status, 415);
}

#[tokio::test]
async fn oversized_bodies_are_413_and_the_server_keeps_serving() {
    let f = fixture().await;
    let big = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": with_meta(call("echo", json!({"message": "x".repeat(5000)})))});
    let reply = f.server.post(big.to_string()).send().await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.code(), -32600);
    assert_eq!(f.server.modern(json!(2), "tools/list", json!({})).send().await.status, 200);
}

/// A refusal made before the endpoint (here, a body over the limit) decides the Origin as the
/// endpoint does: an allowed origin can read it, status and request id, where a browser saw a
/// network error; a refused origin gets the 403 it gets everywhere, not the 413. So does a path
/// with no route.
#[tokio::test]
async fn refusals_before_the_endpoint_decide_the_origin_too() {
    let f = fixture().await;
    let big = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": with_meta(call("echo", json!({"message": "x".repeat(5000)})))});
    let origin = "http://localhost:4012";
    let allowed = f.server.post(big.to_string()).header("Origin", origin).send().await;
    assert_eq!(allowed.status, 413);
    assert_eq!(allowed.header("access-control-allow-origin"), Some(origin));
    let exposed = allowed.header("access-control-expose-headers").unwrap_or_default().to_ascii_lowercase();
    assert!(exposed.contains("x-mcp-request-id"), "{exposed}");
    let refused = f.server.post(big.to_string()).header("Origin", "https://evil.example").send().await;
    assert_eq!((refused.status, refused.text().as_str()), (403, "Forbidden: Origin not allowed"));
    assert_eq!(refused.header("access-control-allow-origin"), None);
    assert!(refused.header("x-mcp-request-id").is_some(), "still a line an operator can find");
    let unrouted = f.server.request("POST", "/api/nothing-here").header("Origin", origin).send().await;
    assert_eq!((unrouted.status, unrouted.header("access-control-allow-origin")), (404, Some(origin)));
    assert!(unrouted.text().contains("the MCP endpoint is /api/mcp"), "a 404 names the endpoint: {}", unrouted.text());
    let unrouted = f.server.request("POST", "/api/nothing-here").header("Origin", "https://evil.example").send().await;
    assert_eq!(unrouted.status, 403);
    let plain = f.server.post(big.to_string()).send().await;
    assert_eq!((plain.status, plain.header("access-control-allow-origin")), (413, None), "no Origin, no CORS");
}

#[tokio::test]
async fn notifications_are_accepted_with_202() {
    let f = fixture().await;
    let reply =
        f.server.post(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#).send().await;
    assert_eq!(reply.status, 202);
    assert!(reply.body.is_empty());
}

#[tokio::test]
async fn header_and_meta_errors_follow_the_table() {
    let f = fixture().await;
    let s = &f.server;
    // Missing MCP-Protocol-Version header, with a modern _meta.
    let reply = s.modern(json!(1), "tools/list", json!({})).without("MCP-Protocol-Version").send().await;
    assert_eq!((reply.status, reply.code()), (400, -32020));
    assert_eq!(reply.json()["id"], 1);
    // Missing _meta and missing keys.
    let reply = s.modern(json!("a"), "tools/list", json!({"_meta": {}})).send().await;
    assert_eq!((reply.status, reply.code()), (400, -32602));
    assert_eq!(reply.json()["id"], "a");
    let no_caps = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}});
    let reply = s.modern(json!(1), "tools/list", no_caps).send().await;
    assert_eq!((reply.status, reply.code()), (400, -32602));
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("clientCapabilities"));
    // Header disagrees with _meta.
    let reply = s.modern(json!(1), "tools/list", json!({})).replace("MCP-Protocol-Version", "2025-11-25").send().await;
    assert_eq!((reply.status, reply.code()), (400, -32020));
    // Unsupported version in both.
    let old = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01", "io.modelcontextprotocol/clientCapabilities": {}}});
    let reply = s.modern(json!(1), "tools/list", old).replace("MCP-Protocol-Version", "1900-01-01").send().await;
    assert_eq!((reply.status, reply.code()), (400, -32022));
    assert_eq!(reply.json()["error"]["data"], json!({"supported": ["2026-07-28"], "requested": "1900-01-01"}));
    // Mcp-Method missing, mismatched, differently cased, repeated, or base64-encoded (the
    // sentinel is for Mcp-Name and Mcp-Param-*; a gateway routing on this header would read it
    // as something else).
    for call in [
        s.modern(json!(1), "tools/list", json!({})).without("Mcp-Method"),
        s.modern(json!(1), "tools/list", json!({})).replace("Mcp-Method", "prompts/list"),
        s.modern(json!(1), "tools/list", json!({})).replace("Mcp-Method", "TOOLS/LIST"),
        s.modern(json!(1), "tools/list", json!({})).header("Mcp-Method", "tools/list"),
        s.modern(json!(1), "tools/list", json!({})).replace("Mcp-Method", "=?base64?dG9vbHMvbGlzdA==?="),
    ] {
        let reply = call.send().await;
        assert_eq!((reply.status, reply.code()), (400, -32020), "{}", reply.text());
    }
    // Header names are case-insensitive.
    let reply = s
        .modern(json!(1), "tools/list", json!({}))
        .without("Mcp-Method")
        .header("MCP-METHOD", "tools/list")
        .send()
        .await;
    assert_eq!(reply.status, 200);
    // Mcp-Name missing, mismatched, undecodable; accepted with surrounding whitespace.
    for call in [
        s.modern(json!(1), "tools/call", call("echo", json!({"message":"m"}))).without("Mcp-Name"),
        s.modern(json!(1), "tools/call", call("echo", json!({"message":"m"}))).replace("Mcp-Name", "fail"),
        s.modern(json!(1), "tools/call", call("echo", json!({"message":"m"}))).replace("Mcp-Name", "=?base64?ZWNobw?="),
    ] {
        let reply = call.send().await;
        assert_eq!((reply.status, reply.code()), (400, -32020), "{}", reply.text());
    }
    let reply = s
        .modern(json!(1), "tools/call", call("echo", json!({"message":"m"})))
        .replace("Mcp-Name", "  echo  ")
        .send()
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = s
        .modern(json!(1), "tools/call", call("echo", json!({"message":"m"})))
        .replace("Mcp-Name", "=?base64?ZWNobw==?=")
        .send()
        .await;
    assert_eq!(reply.status, 200, "the base64 sentinel is decoded: {}", reply.text());
    // An invalid logLevel.
    let bad_level = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/logLevel": "loud"}});
    assert_eq!(s.modern(json!(1), "tools/list", bad_level).send().await.code(), -32602);
}

#[tokio::test]
async fn unknown_and_removed_methods_are_404_with_a_body() {
    let f = fixture().await;
    for method in [
        "nope/nothing",
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "prompts/list",
        "completion/complete",
    ] {
        let reply = f.server.modern(json!(5), method, json!({})).send().await;
        assert_eq!((reply.status, reply.code()), (404, -32601), "{method}");
        assert_eq!(reply.json()["id"], 5);
    }
}

#[tokio::test]
async fn mcp_param_headers_must_mirror_the_arguments() {
    let f = fixture().await;
    let ok = f
        .server
        .modern(json!(1), "tools/call", call("region", json!({"region": "us-west1"})))
        .header("Mcp-Param-Region", "us-west1")
        .send()
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let encoded = f
        .server
        .modern(json!(1), "tools/call", call("region", json!({"region": "Hello, 世界"})))
        .header("mcp-param-region", "=?base64?SGVsbG8sIOS4lueVjA==?=")
        .send()
        .await;
    assert_eq!(encoded.status, 200, "{}", encoded.text());
    for header in [None, Some("eu-west1"), Some("=?base64?SGVsbG8?=")] {
        let mut c = f.server.modern(json!(1), "tools/call", call("region", json!({"region": "us-west1"})));
        if let Some(h) = header {
            c = c.header("Mcp-Param-Region", h);
        }
        let reply = c.send().await;
        assert_eq!((reply.status, reply.code()), (400, -32020), "{header:?}");
    }
    // An annotated argument below the root is mirrored too: present, its header must be sent and
    // equal; absent or null on the way, none is expected.
    let nested = json!({"region": "us-west1", "placement": {"zone": "b"}});
    let both = |zone: Option<&str>| {
        let c = f
            .server
            .modern(json!(1), "tools/call", call("region", nested.clone()))
            .header("Mcp-Param-Region", "us-west1");
        match zone {
            Some(zone) => c.header("Mcp-Param-Zone", zone),
            None => c,
        }
    };
    let ok = both(Some("b")).send().await;
    assert_eq!(
        (ok.status, ok.json()["result"]["content"][0]["text"].clone()),
        (200, json!("us-west1 b")),
        "{}",
        ok.text()
    );
    for zone in [None, Some("c")] {
        let reply = both(zone).send().await;
        assert_eq!((reply.status, reply.code()), (400, -32020), "{zone:?}: {}", reply.text());
        if zone.is_some() {
            assert!(reply.text().contains("argument placement.zone"), "{}", reply.text());
        }
    }
    for absent in [json!({"region": "us-west1"}), json!({"region": "us-west1", "placement": null})] {
        let reply = f
            .server
            .modern(json!(1), "tools/call", call("region", absent.clone()))
            .header("Mcp-Param-Region", "us-west1")
            .send()
            .await;
        assert_eq!(reply.status, 200, "{absent}: {}", reply.text());
    }
}

#[tokio::test]
async fn tools_validate_before_running_and_report_errors_in_band() {
    let f = fixture().await;
    let s = &f.server;
    let unknown = s.modern(json!(1), "tools/call", call("nope", json!({}))).send().await;
    assert_eq!(unknown.code(), -32602);
    assert!(unknown.json()["error"]["message"].as_str().unwrap().contains("not found"));
    for bad in [json!({}), json!({"n": 0}), json!({"n": 11}), json!({"n": "3"}), json!({"n": 1.5})] {
        let reply = s.modern(json!(1), "tools/call", call("count", bad.clone())).send().await;
        let result = &reply.json()["result"];
        assert_eq!(result["isError"], true, "{bad}: {}", reply.text());
        assert_eq!(result["resultType"], "complete");
    }
    assert_eq!(f.calls.load(Ordering::SeqCst), 0, "no handler ran for invalid arguments");
    let ok = s.modern(json!(1), "tools/call", call("count", json!({"n": 2, "principal": "admin"}))).send().await;
    assert_eq!(ok.json()["result"]["content"][0]["text"], "counted");
    assert_eq!(f.calls.load(Ordering::SeqCst), 2);
    let failed = s.modern(json!(1), "tools/call", call("fail", json!({}))).send().await.json();
    assert_eq!(failed["result"]["isError"], true);
    assert_eq!(failed["result"]["content"][0]["text"], "backend said no: exactly this");
    let info = &ok.json()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info, &json!({"name": "test-server", "version": "9.9.9"}));
}

#[tokio::test]
async fn structured_output_is_checked_against_the_output_schema() {
    let f = fixture().await;
    let mut cursor = Value::Null;
    let weather = loop {
        let page =
            f.server.modern(json!(1), "tools/list", json!({"cursor": cursor})).send().await.json()["result"].clone();
        if let Some(tool) = page["tools"].as_array().unwrap().iter().find(|t| t["name"] == "weather") {
            break tool.clone();
        }
        cursor = page["nextCursor"].clone();
        assert!(cursor.is_string(), "weather is listed");
    };
    assert_eq!(weather["title"], "Weather");
    assert_eq!(weather["annotations"], json!({"readOnlyHint": true, "openWorldHint": false}));
    assert_eq!(weather["outputSchema"]["required"], json!(["temperature"]));
    let result =
        f.server.modern(json!(1), "tools/call", call("weather", json!({}))).send().await.json()["result"].clone();
    assert_eq!(result["structuredContent"], json!({"temperature": 22.5}));
    assert_eq!(result["content"][0], json!({"type": "text", "text": "{\"temperature\":22.5}"}));
    assert_eq!(result["content"][1], json!({"type": "resource_link", "uri": "test://a", "name": "a"}));
    let broken = f.server.modern(json!(1), "tools/call", call("weather", json!({"broken": true}))).send().await;
    assert_eq!(broken.code(), -32603, "output that breaks the contract never reaches the client");
    let message = broken.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("does not match its outputSchema (temperature"), "says where: {message}");
}

#[tokio::test]
async fn a_refused_origin_never_reaches_the_handler() {
    let f = fixture().await;
    let reply = f
        .server
        .modern(json!(1), "tools/call", call("count", json!({"n": 1})))
        .header("Origin", "https://evil.example")
        .send()
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(f.calls.load(Ordering::SeqCst), 0);
    let allowed = f
        .server
        .modern(json!(1), "tools/call", call("count", json!({"n": 1})))
        .header("Origin", "http://127.0.0.1:3000")
        .send()
        .await;
    assert_eq!(allowed.json()["result"]["content"][0]["text"], "counted");
    assert_eq!(f.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_panicking_tool_is_contained() {
    let f = fixture().await;
    let reply = f.server.modern(json!(7), "tools/call", call("boom", json!({}))).send().await;
    assert_eq!(reply.code(), -32603);
    assert_eq!(reply.json()["id"], 7);
    assert!(!reply.text().contains("tool bug"), "panic detail stays out of the response");
    assert_eq!(f.server.modern(json!(8), "tools/list", json!({})).send().await.status, 200);
}

#[tokio::test]
async fn lists_paginate_with_opaque_cursors_and_carry_cache_hints() {
    let f = fixture().await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let result = f.server.modern(json!(1), "tools/list", params).send().await.json()["result"].clone();
        assert_eq!((result["ttlMs"].clone(), result["cacheScope"].clone()), (json!(0), json!("private")));
        assert_eq!(result["resultType"], "complete");
        names.extend(result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(names, ["echo", "count", "fail", "boom", "wait", "region", "logs", "ask", "weather", "change"]);
    for bad in [json!("garbage!"), json!(42), json!("b3M6OTk5")] {
        let reply = f.server.modern(json!(1), "tools/list", json!({"cursor": bad})).send().await;
        assert_eq!(reply.code(), -32602, "{bad}");
    }
}

#[tokio::test]
async fn resources_not_found_is_32602_with_the_uri() {
    let f = fixture().await;
    let reply = f.server.modern(json!(1), "resources/read", json!({"uri": "test://missing"})).send().await;
    assert_eq!(reply.code(), -32602);
    assert_eq!(reply.json()["error"]["data"]["uri"], "test://missing");
    let read = f.server.modern(json!(1), "resources/read", json!({"uri": "test://a"})).send().await.json();
    assert_eq!(read["result"]["contents"][0]["text"], "A");
    assert_eq!(read["result"]["cacheScope"], "private");
}

#[tokio::test]
async fn discover_reports_versions_capabilities_and_cache_hints() {
    let f = fixture().await;
    let result = f.server.modern(json!(1), "server/discover", json!({})).send().await.json()["result"].clone();
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(result["capabilities"]["tools"], json!({"listChanged": true}));
    assert!(result["capabilities"].get("prompts").is_none());
    assert_eq!((result["ttlMs"].clone(), result["cacheScope"].clone()), (json!(0), json!("private")));
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "test-server");
}

#[tokio::test]
async fn progress_and_logs_stream_as_sse_only_when_asked() {
    let f = fixture().await;
    let meta = |extra: Value| {
        let mut meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
        meta.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        meta
    };
    let plain = f.server.modern(json!(1), "tools/call", call("logs", json!({}))).send().await;
    assert_eq!(plain.header("content-type"), Some("application/json"), "no logLevel: no notifications, plain JSON");
    let mut params = call("logs", json!({}));
    params["_meta"] = meta(json!({"io.modelcontextprotocol/logLevel": "info"}));
    let streamed = f.server.modern(json!(2), "tools/call", params).send().await;
    assert_eq!(streamed.header("content-type"), Some("text/event-stream"));
    assert_eq!(streamed.header("x-accel-buffering"), Some("no"));
    let events = streamed.events();
    let levels: Vec<&str> = events
        .iter()
        .filter(|e| e["method"] == "notifications/message")
        .map(|e| e["params"]["level"].as_str().unwrap())
        .collect();
    assert_eq!(levels, ["info", "error"], "only at or above the requested level");
    assert_eq!(events.last().unwrap()["id"], 2, "the response ends the stream");
    assert!(!streamed.text().contains("\nid:"), "no resumable event ids");
    // The handler sent both notifications and its result without waiting on anything, so the
    // body found all three at once: one chunk, one write (no write left waiting on Nagle).
    assert_eq!(streamed.chunks, Some(1), "{}", streamed.text());
}

/// More progress than the stream holds before the body reads it (64 events) all arrives, in
/// order and once each: a handler that fills the stream waits for the body to drain it, and
/// nothing is dropped on the way.
#[tokio::test]
async fn progress_beyond_what_the_stream_holds_arrives_in_order() {
    use std::sync::Arc;
    use vercel_mcp::protocol::types::CallToolResult;
    use vercel_mcp::server::{McpServer, NoArguments, ToolDef};
    const STEPS: u32 = 300;
    let mut server = McpServer::new("many", "1");
    server.tool(ToolDef::new("many").description("Reports many steps"), |ctx, _: NoArguments| async move {
        for step in 1..=STEPS {
            ctx.progress(f64::from(step), Some(f64::from(STEPS)), None).await;
        }
        CallToolResult::text("done")
    });
    let parts = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, parts.endpoint()))).await;
    let mut params = call("many", json!({}));
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "m"});
    let streamed = server.modern(json!(1), "tools/call", params).send().await;
    let events = streamed.events();
    let steps: Vec<u64> =
        events[..events.len() - 1].iter().map(|e| e["params"]["progress"].as_f64().unwrap() as u64).collect();
    assert_eq!(steps, (1..=u64::from(STEPS)).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap()["result"]["content"][0]["text"], "done");
    assert!(streamed.chunks.unwrap() > 1, "a full stream was read in more than one chunk");
}

#[tokio::test]
async fn closing_the_stream_cancels_the_handler() {
    let f = fixture().await;
    let mut params = call("wait", json!({}));
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "t1"});
    let (status, head, mut stream) = f.server.modern(json!(1), "tools/call", params).open().await;
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("text/event-stream"));
    let events = read_events(&mut stream, 1).await;
    let progress = json!({"progressToken": "t1", "progress": 1.0, "total": 2.0, "message": "started"});
    assert_eq!(events[0], json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}));
    let cancelled = f.cancelled.notified();
    drop(stream);
    tokio::time::timeout(std::time::Duration::from_secs(10), cancelled).await.expect("the handler was dropped");
}

/// A call's stream carries a keep-alive comment every keep-alive period while its tool works
/// quietly after a notification: clients and proxies give up on a silent stream. A call that
/// sends nothing before its answer stays plain JSON (a comment would turn it into a stream).
#[tokio::test]
async fn a_quiet_stream_is_kept_alive() {
    use tokio::io::AsyncReadExt;
    let (calls, cancelled) = (Default::default(), Arc::new(tokio::sync::Notify::new()));
    let mut config = Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    config.settings.keep_alive = std::time::Duration::from_millis(100);
    let server =
        common::TestServer::start(Arc::new(App::new(common::fixture_server(&calls, &cancelled), config.endpoint())))
            .await;
    let mut params = call("wait", json!({}));
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "t1"});
    let (status, _, mut stream) = server.modern(json!(1), "tools/call", params).open().await;
    assert_eq!(status, 200);
    let mut text = String::new();
    let mut chunk = [0u8; 4096];
    while text.matches(": keep-alive").count() < 2 {
        let read = common::bounded("two keep-alives", stream.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "the stream ended: {text}");
        text.push_str(&String::from_utf8_lossy(&chunk[..read]));
    }
    let progress = text.find("notifications/progress").expect("the notification first");
    assert!(progress < text.find(": keep-alive").unwrap(), "{text}");
    drop(stream);
    // A listen stream too, from the same timer (its loop has none of its own).
    let (status, _, mut listening) = server
        .modern(json!(3), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}))
        .open()
        .await;
    assert_eq!(status, 200);
    let mut text = String::new();
    while text.matches(": keep-alive").count() < 2 {
        let read = common::bounded("two keep-alives on a listen stream", listening.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "the listen stream ended: {text}");
        text.push_str(&String::from_utf8_lossy(&chunk[..read]));
    }
    assert!(text.contains("notifications/subscriptions/acknowledged"), "{text}");
    drop(listening);
    // A tool that works quietly past several periods and sends nothing first: plain JSON.
    let mut quiet = vercel_mcp::McpServer::new("quiet", "1");
    quiet.tool(
        vercel_mcp::server::ToolDef::new("slow").description("Answers after a while"),
        |_, _: vercel_mcp::server::NoArguments| async {
            tokio::time::sleep(std::time::Duration::from_millis(350)).await;
            "done"
        },
    );
    let quiet = common::TestServer::start(Arc::new(App::new(quiet, config.endpoint()))).await;
    let reply = quiet.modern(json!(2), "tools/call", call("slow", json!({}))).send().await;
    assert_eq!((reply.status, reply.header("content-type")), (200, Some("application/json")), "{}", reply.text());
    assert_eq!(reply.json()["result"]["content"][0]["text"], "done");
}

/// A `requestState` is bound to the endpoint that minted it: another endpoint of the same
/// deployment (same key, same tool, same caller, same arguments) refuses it as invalid, while
/// the minting endpoint accepts it.
#[tokio::test]
async fn request_state_is_refused_by_another_endpoint() {
    let (calls, cancelled) = (Default::default(), Arc::new(tokio::sync::Notify::new()));
    let config = Parts::for_tests(Arc::new(ManualClock::new(1_000_000)));
    let here =
        common::TestServer::start(Arc::new(App::new(common::fixture_server(&calls, &cancelled), config.endpoint())))
            .await;
    let mut endpoint = config.endpoint();
    endpoint.auth = config.settings.auth.for_endpoint("/api/examples/elsewhere", vec![]);
    let elsewhere =
        common::TestServer::start(Arc::new(App::new(common::fixture_server(&calls, &cancelled), endpoint))).await;
    let ask = |server: &common::TestServer, state: Option<&str>| {
        let mut params = call("ask", json!({}));
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
        if let Some(state) = state {
            params["inputResponses"] = json!({"name": {"action": "accept", "content": {"name": "Ada"}}});
            params["requestState"] = json!(state);
        }
        server.modern(json!(1), "tools/call", params).send()
    };
    let first = ask(&here, None).await.json();
    let state = first["result"]["requestState"].as_str().expect("a state").to_owned();
    let replayed = ask(&elsewhere, Some(&state)).await;
    assert_eq!(replayed.code(), -32602);
    assert_eq!(replayed.json()["error"]["data"]["reason"], "invalid");
    let done = ask(&here, Some(&state)).await.json();
    assert_eq!(done["result"]["content"][0]["text"], "hi Ada", "the minting endpoint takes it");
}

#[tokio::test]
async fn mrtr_state_is_sealed_bound_and_expires() {
    let f = fixture().await;
    let s = &f.server;
    // Without the elicitation capability the server may not ask: -32021 names what is missing.
    let undeclared = s.modern(json!(1), "tools/call", call("ask", json!({}))).send().await;
    assert_eq!((undeclared.status, undeclared.code()), (400, -32021));
    assert_eq!(undeclared.json()["error"]["data"]["requiredCapabilities"], json!({"elicitation": {"form": {}}}));
    // Declared, but not as an object: not declared. Only the URL mode, not the form mode: neither.
    for declared in [json!({"form": false}), json!({"form": "yes"}), json!({"url": {}})] {
        let mut params = call("ask", json!({}));
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": declared}});
        let reply = s.modern(json!(1), "tools/call", params).send().await;
        assert_eq!((reply.status, reply.code()), (400, -32021), "{declared}");
    }
    let first =
        s.modern(json!(1), "tools/call", eliciting(call("ask", json!({})))).send().await.json()["result"].clone();
    assert_eq!(first["resultType"], "input_required");
    assert!(first.get("ttlMs").is_none());
    assert_eq!(first["inputRequests"]["name"]["method"], "elicitation/create");
    let state = first["requestState"].as_str().unwrap().to_owned();
    let retry = |state: &str, arguments: Value| {
        let mut params = call("ask", arguments);
        params["inputResponses"] = json!({"name": {"action": "accept", "content": {"name": "Ada"}}});
        params["requestState"] = json!(state);
        s.modern(json!(2), "tools/call", eliciting(params))
    };
    assert_eq!(first["inputRequests"].as_object().unwrap().len(), 1);
    let done = retry(&state, json!({})).send().await.json();
    assert_eq!(done["result"]["content"][0]["text"], "hi Ada");
    // Tampered, replayed onto other arguments, wrong type.
    let mut tampered = state.clone().into_bytes();
    let middle = tampered.len() / 2;
    tampered[middle] = if tampered[middle] == b'A' { b'B' } else { b'A' };
    for (bad, args) in [
        (String::from_utf8(tampered).unwrap(), json!({})),
        (format!("{state}-TAMPERED"), json!({})),
        (state.clone(), json!({"extra": 1})),
    ] {
        let reply = retry(&bad, args).send().await;
        assert_eq!(reply.code(), -32602, "{}", reply.text());
        assert_eq!(reply.json()["error"]["data"]["reason"], "invalid");
    }
    // Expired.
    f.clock.advance_ms(10 * 60 * 1000);
    let reply = retry(&state, json!({})).send().await;
    assert_eq!(reply.code(), -32602);
    assert_eq!(reply.json()["error"]["data"]["reason"], "expired");
    // Non-object input responses are refused.
    let mut params = call("ask", json!({}));
    params["inputResponses"] = json!({"name": 12345});
    assert_eq!(s.modern(json!(3), "tools/call", params).send().await.code(), -32602);
}

#[tokio::test]
async fn listen_acknowledges_first_tags_every_message_and_closes_gracefully() {
    let f = fixture().await;
    let params = json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}});
    let (status, _, mut stream) = f.server.modern(json!(42), "subscriptions/listen", params).open().await;
    assert_eq!(status, 200);
    let ack = read_events(&mut stream, 1).await;
    assert_eq!(ack[0]["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack[0]["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "prompts are not offered, so not honoured"
    );
    f.server.modern(json!(1), "tools/call", call("change", json!({}))).send().await;
    let events = read_events(&mut stream, 2).await;
    assert_eq!(events[0]["method"], "notifications/tools/list_changed");
    for event in [&ack[0], &events[0]] {
        assert_eq!(event["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
    }
    assert_eq!(events[1]["id"], 42, "graceful close with the listen result");
    assert_eq!(events[1]["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
    let long = json!({"notifications": {"resourceSubscriptions": [format!("test://{}", "a".repeat(2048))]}});
    let reply = f.server.modern(json!(1), "subscriptions/listen", long).send().await;
    assert_eq!(reply.code(), -32602, "a URI over 2048 bytes: {}", reply.text());
    let with_tasks = json!({"notifications": {"taskIds": ["x"]}});
    let reply = f.server.modern(json!(1), "subscriptions/listen", with_tasks).send().await;
    assert_eq!((reply.status, reply.code()), (400, -32021));
}

/// A listen stream that falls behind the change bus (more changes at once than the bus keeps)
/// does not lose what it missed: it is sent every notification it honours once, then goes on.
/// Before, the resource update below was dropped without a word.
#[tokio::test]
async fn a_listen_stream_that_falls_behind_is_caught_up() {
    let mut server = vercel_mcp::McpServer::new("behind", "1");
    server
        .tool(ToolDef::new("noop").description("Does nothing"), |_, _: NoArguments| async { CallToolResult::text("") });
    for uri in ["test://a", "test://b"] {
        server.resource(Resource::new(uri, uri), |_, uri| async move {
            Ok(vec![ResourceContents::text(uri, "text/plain", "x")])
        });
    }
    let mut config = Parts::for_tests(Arc::new(ManualClock::new(1_000_000)));
    config.settings.listen_max_duration = std::time::Duration::from_millis(300);
    let bus = config.bus.clone();
    let s = common::TestServer::start(Arc::new(App::new(server, config.endpoint()))).await;
    let filter = json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": ["test://a"]}});
    let (_, _, mut stream) = s.modern(json!("L"), "subscriptions/listen", filter).open().await;
    read_events(&mut stream, 1).await;

    // One runtime thread: the stream cannot read while these are published.
    bus.publish(ChangeEvent::ResourceUpdated("test://a".into()));
    for _ in 0..300 {
        bus.publish(ChangeEvent::ResourceUpdated("test://b".into()));
    }
    bus.publish(ChangeEvent::ToolsListChanged);

    let events = read_events(&mut stream, 4).await;
    let methods: Vec<&str> = events[..3].iter().map(|e| e["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        ["notifications/tools/list_changed", "notifications/resources/updated", "notifications/tools/list_changed"],
        "the catch-up, then the change that was kept"
    );
    assert_eq!(events[1]["params"]["uri"], "test://a", "only the subscribed resource");
    for event in &events[..3] {
        assert_eq!(event["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L");
    }
    assert_eq!(events[3]["id"], "L", "then the graceful close");
}

/// A browser page on an allowed origin: the preflight is answered with the methods, headers and
/// lifetime it needs, and the POST's answer (and its request id) is readable by that page.
#[tokio::test]
async fn an_allowed_origin_gets_cors_on_the_preflight_and_the_answer() {
    let f = fixture().await;
    let origin = "http://localhost:4012";
    let preflight = f
        .server
        .request("OPTIONS", "/api/mcp")
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "content-type, mcp-protocol-version, mcp-method, mcp-name, mcp-param-n",
        )
        .send()
        .await;
    assert_eq!(preflight.status, 204);
    assert_eq!(preflight.header("access-control-allow-origin"), Some(origin));
    assert_eq!(preflight.header("access-control-allow-methods"), Some("GET, POST, DELETE"));
    assert_eq!(preflight.header("access-control-max-age"), Some("600"));
    assert!(preflight.header("vary").unwrap().contains("Origin"));
    let allowed: Vec<String> = preflight
        .header("access-control-allow-headers")
        .unwrap()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .collect();
    for name in [
        "content-type",
        "authorization",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "mcp-param-n",
        "traceparent",
    ] {
        assert!(allowed.iter().any(|a| a == name), "{name} allowed: {allowed:?}");
    }
    assert!(preflight.body.is_empty());
    assert_eq!(f.calls.load(Ordering::SeqCst), 0, "a preflight runs nothing");

    let reply =
        f.server.modern(json!(1), "tools/call", call("count", json!({"n": 1}))).header("Origin", origin).send().await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("access-control-allow-origin"), Some(origin));
    assert_eq!(reply.header("vary"), Some("Origin"));
    let exposed = reply.header("access-control-expose-headers").unwrap().to_ascii_lowercase();
    for name in ["www-authenticate", "mcp-session-id", "x-mcp-request-id"] {
        assert!(exposed.contains(name), "{name} exposed: {exposed}");
    }
    assert!(reply.header("x-mcp-request-id").is_some_and(|id| !id.is_empty()));
    // Errors are readable too: a browser client must see why it was refused.
    let error =
        f.server.modern(json!(2), "tools/list", json!({})).header("Origin", origin).without("Mcp-Method").send().await;
    assert_eq!(error.status, 400);
    assert_eq!(error.header("access-control-allow-origin"), Some(origin));
    // Without an Origin there is nothing to echo.
    let plain = f.server.modern(json!(3), "tools/list", json!({})).send().await;
    assert_eq!(plain.status, 200);
    assert!(plain.header("access-control-allow-origin").is_none() && plain.header("vary").is_none());
    let options = f.server.request("OPTIONS", "/api/mcp").send().await;
    assert_eq!((options.status, options.header("allow")), (204, Some("POST, OPTIONS")));
    assert!(options.header("access-control-allow-origin").is_none());
}

/// A refused origin gets the 403 and no CORS header, for the preflight and the request alike;
/// so does a request that carries two `Origin` headers, even when one of them is allowed.
#[tokio::test]
async fn a_refused_origin_gets_no_cors_headers() {
    let f = fixture().await;
    let preflight = f
        .server
        .request("OPTIONS", "/api/mcp")
        .header("Origin", "https://evil.example")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await;
    assert_eq!(preflight.status, 403);
    let post = f
        .server
        .modern(json!(1), "tools/call", call("count", json!({"n": 1})))
        .header("Origin", "http://localhost.evil.example:3000")
        .send()
        .await;
    assert_eq!(post.status, 403);
    let twice = f
        .server
        .modern(json!(1), "tools/call", call("count", json!({"n": 1})))
        .header("Origin", "http://localhost:3000")
        .header("Origin", "https://evil.example")
        .send()
        .await;
    assert_eq!(twice.status, 403, "two Origin headers are refused");
    for reply in [&preflight, &post, &twice] {
        assert_eq!(reply.text(), "Forbidden: Origin not allowed");
        for name in ["access-control-allow-origin", "access-control-allow-methods", "access-control-expose-headers"] {
            assert!(reply.header(name).is_none(), "{name} on a refusal");
        }
    }
    assert_eq!(f.calls.load(Ordering::SeqCst), 0, "no refused request reached the tool");
}

/// The local run with small limits, for the slow-client tests.
async fn limited(limits: vercel_mcp::settings::ConnectionLimits) -> common::TestServer {
    let config = vercel_mcp::Parts::for_tests(std::sync::Arc::new(vercel_mcp::state::SystemClock));
    let routes = vercel_mcp::local::Routes::with_mcp(vercel_mcp::mcp_app(&config)).with_limits(limits);
    common::TestServer::start_routes(routes).await
}

/// Reads until the server closes the connection, waiting at most 5 s (a slow client that the
/// server never cuts off would hang here, and fail).
async fn until_closed(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read_to_end(&mut received)).await; // shorter than common::NETWORK_WAIT: the cut-off is the point
    assert!(read.is_ok(), "the server kept a slow connection open");
    received
}

/// A request the head alone refuses is answered without its body being read: a caller without a
/// credential (or from a refused Origin, or naming no example, or sending another media type)
/// that declares a large body and sends none of it is answered at once, not after the body
/// timeout, and the server holds none of it.
#[tokio::test]
async fn a_head_refused_on_its_own_is_answered_without_its_body() {
    use common::tokens::{auth_config, bearer, stub_jwks};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (jwks, _) = stub_jwks().await;
    let mut config = auth_config(jwks, &[("MCP_AUTH_MODE", "required")]);
    let logs = Arc::new(vercel_mcp::observe::MemorySink::default());
    config.log_sink = logs.clone();
    // Long enough that a body waited for would be answered 408 long after the test gave up.
    let limits = vercel_mcp::settings::ConnectionLimits {
        header_timeout: std::time::Duration::from_secs(60),
        body_timeout: std::time::Duration::from_secs(60),
        max_connections: 16,
    };
    let routes = vercel_mcp::local::Routes::new(&config).with_limits(limits);
    let server = common::TestServer::start_routes(routes).await;
    let token = bearer("alice", "mcp:read");
    let cases = [
        ("/api/mcp", String::new(), "application/json", 401),
        ("/api/mcp", "Authorization: Bearer not-a-token\r\n".to_owned(), "application/json", 401),
        ("/api/mcp", "Origin: https://evil.example\r\n".to_owned(), "application/json", 403),
        ("/api/examples/no-such-example", String::new(), "application/json", 404),
        ("/api/mcp", format!("Authorization: {token}\r\n"), "text/plain", 415),
    ];
    for (path, extra, media, status) in cases {
        let mut client = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\n{extra}Content-Type: {media}\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nContent-Length: 1000000\r\n\r\n"
        );
        client.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(common::NETWORK_WAIT, async {
            let mut chunk = [0u8; 4096];
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed before an answer");
                answer.extend_from_slice(&chunk[..n]);
            }
        })
        .await;
        assert!(read.is_ok(), "{path} {extra}: the head was not answered without its body");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{path} {extra}{media}: {answer}");
    }
    // A caller who may call is read and served as before.
    let served = server.modern(json!(1), "tools/list", json!({})).header("Authorization", &token).send().await;
    assert_eq!(served.status, 200, "{}", served.text());

    // A head that is admitted before its body arrives (the client waits for `100 Continue`, so
    // the body cannot have come with the head) is served by the route it named, as its principal,
    // on /api/mcp and on an example's route alike.
    // Each route is its own resource: a token names the one it is for.
    let example_token = format!(
        "Bearer {}",
        common::tokens::token(
            json!({"sub": "alice", "scope": "mcp:read", "aud": "https://mcp.example.com/api/examples/minimal"})
        )
    );
    for (path, id, token) in [("/api/mcp", 7, &token), ("/api/examples/minimal", 8, &example_token)] {
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": with_meta(json!({}))}).to_string();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let mut client = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        client.write_all(head.as_bytes()).await.unwrap();
        async fn read_until(client: &mut tokio::net::TcpStream, what: &[u8]) -> String {
            let (mut seen, mut chunk) = (Vec::new(), [0u8; 4096]);
            while !seen.windows(what.len()).any(|w| w == what) {
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed before {:?}", String::from_utf8_lossy(what));
                seen.extend_from_slice(&chunk[..n]);
            }
            String::from_utf8_lossy(&seen).into_owned()
        }
        let interim = common::bounded("100 Continue", read_until(&mut client, b"\r\n\r\n")).await;
        assert!(interim.starts_with("HTTP/1.1 100 Continue"), "{path}: {interim}");
        client.write_all(body.as_bytes()).await.unwrap();
        let answer = common::bounded("the answer", read_until(&mut client, b"\"tools\"")).await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{path}: {answer}");
        let line = logs.lines().into_iter().rev().find(|l| l["event"] == "request" && l["status"] == 200).unwrap();
        assert!(line["principal"].as_str().is_some_and(|p| !p.is_empty()), "{path}: served as its principal: {line}");
    }
    // The same head without a credential, waiting for `100 Continue`, is refused instead.
    let mut client = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    client
        .write_all(b"POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n")
        .await
        .unwrap();
    let mut refused = vec![0u8; 4096];
    let n = common::bounded("the refusal", client.read(&mut refused)).await.unwrap();
    let refused = String::from_utf8_lossy(&refused[..n]);
    assert!(refused.starts_with("HTTP/1.1 401 "), "no 100 Continue for a caller who may not call: {refused}");
}

/// Slowloris and slow bodies: a head that never completes is cut off after the header timeout,
/// and a body that stops short gets 408 after the body timeout; neither holds the connection.
#[tokio::test]
async fn slow_heads_and_bodies_are_cut_off() {
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    let server = limited(vercel_mcp::settings::ConnectionLimits {
        header_timeout: Duration::from_millis(200),
        body_timeout: Duration::from_millis(200),
        max_connections: 16,
    })
    .await;
    let mut slowloris = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    slowloris.write_all(b"POST /api/mcp HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
    let answer = until_closed(&mut slowloris).await;
    assert!(!String::from_utf8_lossy(&answer).contains(" 200 "), "no request was served");

    let mut slow_body = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    slow_body
        .write_all(b"POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        .await
        .unwrap();
    let answer = String::from_utf8(until_closed(&mut slow_body).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");

    let healthy = server.modern(json!(1), "tools/list", json!({})).send().await;
    assert_eq!(healthy.status, 200, "a prompt client is served as before");
}

/// A client that pipelines requests and never reads the answers is cut off like one that stops
/// reading a single answer, and does not keep its connection (and its place under the connection
/// cap) for as long as it likes. (The connection counts as busy from the first poll of a
/// request's work, not from hyper's call for it: hyper may take a pipelined request before the
/// answer ahead of it is written out, and poll it only once it is. This run did not reach that
/// order with busy marked at the call; the property is what is checked.)
#[tokio::test]
async fn a_client_that_pipelines_and_never_reads_is_cut_off() {
    use tokio::io::AsyncWriteExt;
    let server = limited(vercel_mcp::settings::ConnectionLimits {
        header_timeout: std::time::Duration::from_millis(300),
        body_timeout: std::time::Duration::from_millis(300),
        max_connections: 16,
    })
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(server.addr).await.unwrap();
    // Far more 404s than the socket buffers and hyper's write buffer hold.
    let requests = "GET /nothing-here HTTP/1.1\r\nHost: x\r\n\r\n".repeat(200_000);
    let writing = tokio::spawn(async move {
        let written = stalled.write_all(requests.as_bytes()).await;
        (written, stalled)
    });
    // The server stops reading once it cannot write; the write ends when the server closes the
    // connection (a bounded wait, not a timing assertion).
    let (written, _stalled) =
        tokio::time::timeout(std::time::Duration::from_secs(20), writing).await.expect("the server closed it").unwrap();
    assert!(written.is_err(), "the server read every request although nothing was read back");
}

/// The header timeout counts from the end of the last response: a kept-alive connection that
/// sends nothing more is closed once it has been idle that long (and not before), while a
/// response that streams for several timeouts is not cut off.
#[tokio::test]
async fn idle_connections_close_after_the_header_timeout_and_streams_do_not() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let timeout = Duration::from_millis(500);
    let server = limited(vercel_mcp::settings::ConnectionLimits {
        header_timeout: timeout,
        body_timeout: timeout,
        max_connections: 16,
    })
    .await;
    let request = |method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": with_meta(params)}).to_string();
        format!(
            "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };

    // Two requests on one connection, the second after more than half the timeout: each
    // response restarts the count.
    let mut idle = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut sent = None;
    for _ in 0..2 {
        sent = Some(Instant::now());
        idle.write_all(request("tools/list", json!({})).as_bytes()).await.unwrap();
        // The whole response: its head, then as many bytes as its Content-Length says.
        let mut response = Vec::new();
        let (head_end, length) = loop {
            let mut chunk = [0u8; 4096];
            let n = idle.read(&mut chunk).await.unwrap();
            assert_ne!(n, 0, "closed before the response ended");
            response.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&response);
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                    .expect("a content length");
                break (end + 4, length.trim().parse::<usize>().unwrap());
            }
        };
        while response.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            let n = idle.read(&mut chunk).await.unwrap();
            assert_ne!(n, 0, "closed before the response ended");
            response.extend_from_slice(&chunk[..n]);
        }
        assert!(response.starts_with(b"HTTP/1.1 200"), "served");
        tokio::time::sleep(timeout * 3 / 4).await;
    }
    let rest = until_closed(&mut idle).await;
    // The server went idle after the last request was sent, so it may close no sooner than a
    // timeout after that; and it does close, within a few.
    let after = sent.expect("two requests were sent").elapsed();
    assert!(after >= timeout, "closed {after:?} after the last request, before the timeout");
    assert!(after < timeout * 4, "closed only {after:?} after the last request");
    assert!(!String::from_utf8_lossy(&rest).contains("HTTP/1.1"), "closed without another response");

    // A listen stream stays open across several timeouts.
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let listen = request("subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    stream.write_all(listen.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let until = Instant::now() + timeout * 4;
    while Instant::now() < until {
        let mut chunk = [0u8; 1024];
        match tokio::time::timeout_at(until.into(), stream.read(&mut chunk)).await {
            Ok(Ok(0)) => panic!("the stream was cut off: {}", String::from_utf8_lossy(&received)),
            Ok(Ok(n)) => received.extend_from_slice(&chunk[..n]),
            Ok(Err(error)) => panic!("{error}"),
            Err(_) => break,
        }
    }
    let received = String::from_utf8_lossy(&received);
    assert!(received.starts_with("HTTP/1.1 200") && received.contains("text/event-stream"), "{received}");
}

/// A client that stops reading a stream does not hold it: once a chunk has waited the header
/// timeout for the client to make room, the connection is closed, and with it the stream's work
/// (here, its caller's only listen slot is free again). Before, the work stopped with hyper's
/// reads, so the stream outlived its own maximum duration for as long as the client kept the
/// connection open.
#[tokio::test]
async fn a_stream_whose_client_stops_reading_is_closed() {
    use tokio::io::AsyncWriteExt;
    let mut server = vercel_mcp::McpServer::new("stalled", "1");
    server.resource(Resource::new("test://a", "a"), |_, uri| async move {
        Ok(vec![ResourceContents::text(uri, "text/plain", "x")])
    });
    let mut config = Parts::for_tests(Arc::new(ManualClock::new(1_000_000)));
    config.settings.listen_caps = vercel_mcp::server::listen::ListenCaps { per_principal: 1, total: 10 };
    config.settings.listen_max_duration = std::time::Duration::from_secs(120);
    let bus = config.bus.clone();
    let limits = vercel_mcp::settings::ConnectionLimits {
        header_timeout: std::time::Duration::from_millis(300),
        body_timeout: std::time::Duration::from_millis(300),
        max_connections: 16,
    };
    let routes = vercel_mcp::local::Routes::with_mcp(Arc::new(App::new(server, config.endpoint()))).with_limits(limits);
    let s = common::TestServer::start_routes(routes).await;

    // Each notification is 2 KiB; the client's receive buffer is about as small as it gets.
    let uri = format!("test://{}", "x".repeat(2000));
    let body = json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
                      "params": with_meta(json!({"notifications": {"resourceSubscriptions": [uri]}}))})
    .to_string();
    let request = format!(
        "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(s.addr).await.unwrap();
    stalled.write_all(request.as_bytes()).await.unwrap();
    let listen = || s.modern(json!(2), "subscriptions/listen", json!({"notifications": {"resourceSubscriptions": []}}));
    assert_eq!(listen().send().await.status, 429, "the stalled stream holds the caller's one slot");

    // Far more than the socket buffers and hyper's write buffer hold, with turns for the server.
    for _ in 0..2000 {
        bus.publish(ChangeEvent::ResourceUpdated(uri.clone()));
        tokio::task::yield_now().await;
    }
    // The slot comes free once the stalled connection is closed (a bounded wait, not a timing
    // assertion: about the header timeout after the buffers filled).
    let mut statuses = Vec::new();
    for _ in 0..100 {
        let (status, _, _stream) = listen().open().await;
        statuses.push(status);
        if status != 429 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(statuses.last(), Some(&200), "the stalled stream was closed and its slot freed: {statuses:?}");
    let received = String::from_utf8_lossy(&until_closed(&mut stalled).await).into_owned();
    assert!(received.starts_with("HTTP/1.1 200") && received.contains("notifications/resources/updated"));
    assert!(!received.contains("\"result\""), "cut off, not closed gracefully: it never read");
}

/// A buffered answer far larger than the socket buffers, read slowly but steadily, arrives whole:
/// the header timeout counts from the client's last read of it, not from when hyper took the
/// body (which, before, cut the answer short about a header timeout in). A client that stops
/// reading the same answer is still cut off after the timeout.
#[tokio::test]
async fn a_large_answer_read_slowly_arrives_whole_and_one_not_read_is_cut() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SIZE: usize = 16 << 20;
    let mut server = vercel_mcp::McpServer::new("large", "1");
    server.tool(ToolDef::new("large").description("Answers 16 MiB"), |_, _: NoArguments| async {
        CallToolResult::text("x".repeat(SIZE))
    });
    let limits = vercel_mcp::settings::ConnectionLimits {
        header_timeout: std::time::Duration::from_secs(1),
        body_timeout: std::time::Duration::from_secs(1),
        max_connections: 16,
    };
    let config = Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let routes = vercel_mcp::local::Routes::with_mcp(Arc::new(App::new(server, config.endpoint()))).with_limits(limits);
    let s = common::TestServer::start_routes(routes).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": with_meta(json!({"name": "large", "arguments": {}}))})
    .to_string();
    let request = format!(
        "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: large\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let connect = || async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(64 * 1024).unwrap();
        let mut stream = socket.connect(s.addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        stream
    };

    // Reads at most 64 KiB every 10 ms: some 2.5 s for the whole answer, well past the timeout.
    // The kernel lets the server write again each time about a third of its send buffer (4 MiB
    // at most) has drained: every 0.2 s or so here, well within the timeout.
    let mut slow = connect().await;
    let mut received = Vec::with_capacity(SIZE + 4096);
    let mut chunk = vec![0u8; 64 * 1024];
    let started = std::time::Instant::now();
    loop {
        let read = tokio::time::timeout(common::NETWORK_WAIT, slow.read(&mut chunk)).await.expect("the server answers");
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(started.elapsed() > limits.header_timeout * 2, "the answer was read over more than the timeout");
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..text.len().min(200)]);
    let answer = &text[text.find("\r\n\r\n").expect("a head") + 4..];
    let answer: Value = serde_json::from_str(answer).expect("the whole answer arrived");
    assert_eq!(answer["result"]["content"][0]["text"].as_str().map(str::len), Some(SIZE));

    // The same answer, not read once it has begun: the connection is closed about a timeout
    // after the socket filled, with most of the answer unsent. (Building the answer takes the
    // server a while, a second in a debug build on a slow host; the stall counts from its start.)
    let mut stalled = connect().await;
    let mut head = [0u8; 64];
    common::bounded("the answer's first bytes", stalled.read_exact(&mut head)).await.unwrap();
    tokio::time::sleep(limits.header_timeout * 2).await;
    let cut = until_closed(&mut stalled).await;
    assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 200"));
    assert!(head.len() + cut.len() < SIZE, "{} bytes: the stalled client was sent the whole answer", cut.len());
}

/// At most `max_connections` connections are served at once: a third client waits, unserved,
/// while two idle connections hold the slots, and is served as soon as one of them goes.
#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_slot() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = limited(vercel_mcp::settings::ConnectionLimits {
        header_timeout: Duration::from_secs(60),
        body_timeout: Duration::from_secs(60),
        max_connections: 2,
    })
    .await;
    let first = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let _second = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": with_meta(json!({}))}).to_string();
    let request = format!(
        "POST /api/mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut third = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    third.write_all(request.as_bytes()).await.unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut byte)).await;
    assert!(early.is_err(), "the third connection was served while two held the slots");
    drop(first);
    let answer = String::from_utf8(until_closed(&mut third).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "served once a slot freed: {answer}");
}

/// One caller may hold at most `per_principal` listen streams (the anonymous caller is one
/// caller); past that a listen gets 429 with a clear error, and closing a stream frees its slot.
#[tokio::test]
async fn listen_streams_are_capped_per_caller() {
    let mut config = vercel_mcp::Parts::for_tests(std::sync::Arc::new(vercel_mcp::state::SystemClock));
    config.settings.listen_caps = vercel_mcp::server::listen::ListenCaps { per_principal: 2, total: 10 };
    let server = common::TestServer::start(vercel_mcp::mcp_app(&config)).await;
    let listen =
        || server.modern(json!(9), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    let (status, _, mut one) = listen().open().await;
    assert_eq!(status, 200);
    read_events(&mut one, 1).await;
    let (status, _, mut two) = listen().open().await;
    assert_eq!(status, 200);
    read_events(&mut two, 1).await;
    let refused = listen().send().await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(refused.json()["error"]["message"].as_str().unwrap().contains("limit 2"), "{}", refused.text());
    drop(one);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, _, stream) = listen().open().await;
        if status == 200 {
            drop(stream);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "closing a stream never freed its slot");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The caps hold per instance: one process serving many endpoints (the local run; the
/// examples' function) counts a caller's streams across all of them. Before, each endpoint
/// counted its own, so one caller held the cap once per endpoint.
#[tokio::test]
async fn listen_caps_count_every_endpoint_of_the_process() {
    let mut config = vercel_mcp::Parts::for_tests(std::sync::Arc::new(vercel_mcp::state::SystemClock));
    config.settings.listen_caps = vercel_mcp::server::listen::ListenCaps { per_principal: 1, total: 10 };
    let routes = vercel_mcp::local::Routes::with_mcp(vercel_mcp::mcp_app(&config)).with_examples(&config);
    let server = common::TestServer::start_routes(routes).await;
    let listen = |path: &str| {
        server.modern(json!(9), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}})).at(path)
    };
    let (status, _, mut held) = listen("/api/mcp").open().await;
    assert_eq!(status, 200);
    read_events(&mut held, 1).await;
    let (status, _, _stream) = listen("/api/examples/minimal").open().await;
    assert_eq!(status, 429, "the caller's one stream is open on another endpoint of this process");
}

/// A server with one tool, `book`, that asks for an answer under `ok` first and books on the
/// retry that brings it, counting each booking in `booked`.
fn booking_server(booked: Arc<std::sync::atomic::AtomicUsize>) -> vercel_mcp::McpServer {
    let mut server = vercel_mcp::McpServer::new("t", "1");
    server.tool(
        vercel_mcp::server::ToolDef::new("book").description("Asks, then books"),
        move |ctx: vercel_mcp::server::RequestContext, _: vercel_mcp::server::NoArguments| {
            let booked = booked.clone();
            async move {
                use vercel_mcp::protocol::types::{CallToolResult, InputRequest};
                use vercel_mcp::server::{InputRequired, Outcome};
                if ctx.input_response("ok").is_none() {
                    let ask = InputRequest::ElicitForm {
                        message: "Book it?".into(),
                        requested_schema: json!({"type": "object"}),
                    };
                    return Outcome::InputRequired(InputRequired::new().request("ok", ask));
                }
                booked.fetch_add(1, Ordering::SeqCst);
                Outcome::Complete(CallToolResult::text("booked"))
            }
        },
    );
    server
}

/// Only answers to what a round asked reach the handler (the spec: unknown keys are ignored): a
/// retry's answer to a key its round did not ask is dropped. (A first call's answers reach the
/// handler as they are, as the official suite expects.)
#[tokio::test]
async fn only_answers_to_what_the_round_asked_reach_the_handler() {
    let config = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let mut server = vercel_mcp::McpServer::new("t", "1");
    server.tool(
        vercel_mcp::server::ToolDef::new("peek").description("Asks a, then says whether it saw b"),
        |ctx: vercel_mcp::server::RequestContext, _: vercel_mcp::server::NoArguments| async move {
            use vercel_mcp::protocol::types::{CallToolResult, InputRequest};
            use vercel_mcp::server::{InputRequired, Outcome};
            if ctx.input_response("a").is_none() {
                let ask =
                    InputRequest::ElicitForm { message: "a?".into(), requested_schema: json!({"type": "object"}) };
                return Outcome::InputRequired(InputRequired::new().request("a", ask));
            }
            Outcome::Complete(CallToolResult::text(if ctx.input_response("b").is_some() { "saw b" } else { "a only" }))
        },
    );
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, config.endpoint()))).await;
    let accept = json!({"action": "accept", "content": {}});
    let asked = server.modern(json!(2), "tools/call", eliciting(call("peek", json!({})))).send().await.json();
    let mut retry = call("peek", json!({}));
    retry["inputResponses"] = json!({"a": accept, "b": accept});
    retry["requestState"] = asked["result"]["requestState"].clone();
    let done = server.modern(json!(3), "tools/call", eliciting(retry)).send().await.json();
    assert_eq!(done["result"]["content"][0]["text"], "a only", "{done}");
}

/// With the store of used states down, a retry is refused with -32603 and a correlation id the
/// `state.fault` line carries, saying the state may count as used now; the handler does not run.
#[tokio::test]
async fn a_retry_with_the_state_store_down_is_refused_without_running() {
    let logs = Arc::new(vercel_mcp::observe::MemorySink::default());
    let mut config = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    config.log_sink = logs.clone();
    let down = vercel_mcp::store::Redis::connect("redis://127.0.0.1:1", "down").unwrap();
    config.request_state_nonces = Some(Arc::new(vercel_mcp::state::RedisNonces::new(&down)));
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = booking_server(ran.clone());
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, config.endpoint()))).await;
    let first = server.modern(json!(1), "tools/call", eliciting(call("book", json!({})))).send().await.json();
    let mut retry = call("book", json!({}));
    retry["inputResponses"] = json!({"ok": {"action": "accept", "content": {}}});
    retry["requestState"] = first["result"]["requestState"].clone();
    let refused = server.modern(json!(2), "tools/call", eliciting(retry)).send().await;
    assert_eq!(refused.code(), -32603, "{}", refused.text());
    let message = refused.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("may count as used now"), "{message}");
    let id = message.split("(correlation id ").nth(1).and_then(|rest| rest.split(')').next()).expect("an id");
    let fault = logs.lines().into_iter().find(|l| l["event"] == "state.fault").expect("a state.fault line");
    assert_eq!(
        (fault["correlationId"].as_str(), fault["operation"].as_str()),
        (Some(id), Some("request_state.consume"))
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the handler did not run");
}

/// A used state's nonce outlives the state on every clock a fleet may run: a state sealed by an
/// instance whose clock runs 30 s ahead, used on another, is still refused as used there once
/// the state's lifetime has passed on the second one's clock (and it is still valid by it).
#[tokio::test]
async fn a_used_state_stays_used_across_instances_whose_clocks_differ() {
    const BASE: u64 = 1_800_000_000_000;
    let (ahead, behind) = (Arc::new(ManualClock::new(BASE + 30_000)), Arc::new(ManualClock::new(BASE)));
    let sealing = vercel_mcp::Parts::for_tests(ahead.clone());
    let mut opening = vercel_mcp::Parts::for_tests(behind.clone());
    opening.request_state_nonces = sealing.request_state_nonces.clone();
    let server = |config: &vercel_mcp::Parts| {
        let server = booking_server(Arc::default());
        common::TestServer::start(Arc::new(vercel_mcp::App::new(server, config.endpoint())))
    };
    let (a, b) = (server(&sealing).await, server(&opening).await);
    let first = a.modern(json!(1), "tools/call", eliciting(call("book", json!({})))).send().await.json();
    let state = first["result"]["requestState"].as_str().expect("asked first").to_owned();
    let retry = || {
        let mut params = call("book", json!({}));
        params["inputResponses"] = json!({"ok": {"action": "accept", "content": {}}});
        params["requestState"] = json!(state);
        b.modern(json!(2), "tools/call", eliciting(params)).send()
    };
    assert_eq!(retry().await.json()["result"]["content"][0]["text"], "booked");
    // The state's ten minutes have passed by the opening clock, not by the sealing one's.
    behind.advance_ms(vercel_mcp::server::mrtr::REQUEST_STATE_TTL_MS + 1);
    let replay = retry().await;
    assert_eq!(replay.json()["error"]["data"]["reason"], "used", "{}", replay.text());
    // Past the sealing clock's expiry too, the state itself has expired.
    behind.advance_ms(30_000);
    assert_eq!(retry().await.json()["error"]["data"]["reason"], "expired");
}

/// `requestState` is single-use by default: the retry that uses it is served once, and the same
/// state again gets `-32602` "Invalid requestState: used" without running the handler. With
/// `MCP_REQUEST_STATE_SINGLE_USE=off` a replay within the state's lifetime runs again.
#[tokio::test]
async fn request_state_is_single_use_unless_turned_off() {
    for single_use in [true, false] {
        let mut config = vercel_mcp::Parts::for_tests(std::sync::Arc::new(vercel_mcp::state::SystemClock));
        if !single_use {
            config.request_state_nonces = None;
        }
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let server = booking_server(calls.clone());
        let server =
            common::TestServer::start(std::sync::Arc::new(vercel_mcp::App::new(server, config.endpoint()))).await;
        let first = server.modern(json!(1), "tools/call", eliciting(call("book", json!({})))).send().await.json();
        let state = first["result"]["requestState"].as_str().expect("asked first").to_owned();
        let retry = || {
            let mut params = call("book", json!({}));
            params["inputResponses"] = json!({"ok": {"action": "accept", "content": {}}});
            params["requestState"] = json!(state);
            server.modern(json!(2), "tools/call", eliciting(params)).send()
        };
        assert_eq!(retry().await.json()["result"]["content"][0]["text"], "booked");
        let replay = retry().await;
        if single_use {
            assert_eq!(replay.code(), -32602, "{}", replay.text());
            assert_eq!(replay.json()["error"]["message"], "Invalid requestState: used");
            assert_eq!(replay.json()["error"]["data"]["reason"], "used");
            assert_eq!(calls.load(Ordering::SeqCst), 1, "the side effect ran once");
        } else {
            assert_eq!(replay.json()["result"]["content"][0]["text"], "booked");
            assert_eq!(calls.load(Ordering::SeqCst), 2, "off: a replay runs again");
        }
        // A state sealed without a nonce (as an older release did) is genuine, correctly bound,
        // and served when states are not single use; while they are, it is refused unrun.
        let mut retry_params = call("book", json!({}));
        retry_params["inputResponses"] = json!({"ok": {"action": "accept", "content": {}}});
        let binding = vercel_mcp::server::mrtr::binding(
            config.settings.auth.config().resource.url(),
            &vercel_mcp::security::Principal::anonymous(),
            "tools/call",
            &retry_params.as_object().unwrap().clone().into(),
        );
        let old = config.settings.sealer.seal(
            vercel_mcp::state::Purpose::RequestState,
            &binding,
            vercel_mcp::server::mrtr::REQUEST_STATE_TTL_MS,
            json!({"s": null}),
        );
        retry_params["requestState"] = json!(old);
        let before = calls.load(Ordering::SeqCst);
        let answer = server.modern(json!(3), "tools/call", eliciting(retry_params)).send().await;
        if single_use {
            assert_eq!(answer.json()["error"]["message"], "Invalid requestState: invalid", "{}", answer.text());
            assert_eq!(calls.load(Ordering::SeqCst), before, "refused before the handler");
        } else {
            assert_eq!(answer.json()["result"]["content"][0]["text"], "booked", "{}", answer.text());
            assert_eq!(calls.load(Ordering::SeqCst), before + 1);
        }
    }
}

/// A `requestState` is bound to the tool it was minted for: the state `ask` sealed is refused on
/// another tool, even one that never asks (other arguments on the same tool:
/// `mrtr_state_is_sealed_bound_and_expires`).
#[tokio::test]
async fn request_state_is_bound_to_its_tool() {
    let f = fixture().await;
    let first = f.server.modern(json!(1), "tools/call", eliciting(call("ask", json!({})))).send().await.json();
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let mut elsewhere = call("count", json!({"n": 1}));
    elsewhere["requestState"] = json!(state);
    let reply = f.server.modern(json!(2), "tools/call", eliciting(elsewhere)).send().await;
    assert_eq!(reply.code(), -32602, "{}", reply.text());
    assert_eq!(reply.json()["error"]["data"]["reason"], "invalid");
    assert_eq!(f.calls.load(Ordering::SeqCst), 0, "the other tool never ran");
}

/// A plain JSON call (no progress token, so no stream) whose client goes away is cancelled too:
/// the handler is dropped when the connection closes, not left running for nobody.
#[tokio::test]
async fn a_json_call_whose_client_leaves_is_cancelled() {
    use tokio::io::AsyncWriteExt;
    let f = fixture().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": with_meta(call("wait", json!({})))})
        .to_string();
    let request = format!(
        "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: wait\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(f.server.addr).await.unwrap();
    let cancelled = f.cancelled.notified();
    stream.write_all(request.as_bytes()).await.unwrap();
    // Give the server the request, then leave without reading an answer.
    tokio::task::yield_now().await;
    drop(stream);
    common::bounded("the handler to be dropped", cancelled).await;
}

/// A handler that panics before it has made its future (a plain closure's body, not its `async`
/// block) is contained like one that panics inside it: the tool, resource or prompt is answered
/// -32603 and the server goes on serving. The registry calls such a handler while the call's
/// contained future runs.
#[tokio::test]
async fn a_handler_that_panics_before_its_future_exists_is_contained() {
    use std::future::Ready;
    use vercel_mcp::protocol::McpError;
    use vercel_mcp::protocol::types::{CallToolResult, GetPromptResult, Prompt, Resource, ResourceContents};
    use vercel_mcp::server::{McpServer, NoArguments, ToolDef};
    let mut server = McpServer::new("eager", "1");
    server.tool(ToolDef::new("eager").description("Panics at once"), |_, _: NoArguments| -> Ready<CallToolResult> {
        panic!("tool bug before the future")
    });
    server.tool(ToolDef::new("fine").description("Answers"), |_, _: NoArguments| async { "fine" });
    server.resource(Resource::new("test://eager", "eager"), |_, _| -> Ready<Result<Vec<ResourceContents>, McpError>> {
        panic!("resource bug before the future")
    });
    server.prompt(Prompt::new("eager"), |_, _: NoArguments| -> Ready<Result<GetPromptResult, McpError>> {
        panic!("prompt bug before the future")
    });
    let client = vercel_mcp::testing::client(server).await;
    let code = |error| match error {
        vercel_mcp::client::ClientError::Rpc { code, message, .. } => {
            assert!(!message.contains("bug before"), "panic detail stays out of the response: {message}");
            code
        }
        other => panic!("not a JSON-RPC error: {other}"),
    };
    assert_eq!(code(client.call_tool("eager", json!({})).await.unwrap_err()), -32603);
    let read = client.request("resources/read", json!({"uri": "test://eager"}).as_object().unwrap().clone()).await;
    assert_eq!(code(read.unwrap_err()), -32603);
    let got = client.request("prompts/get", json!({"name": "eager"}).as_object().unwrap().clone()).await;
    assert_eq!(code(got.unwrap_err()), -32603);
    assert_eq!(client.call_tool("fine", json!({})).await.unwrap().joined_text(), "fine", "still serving");
}
