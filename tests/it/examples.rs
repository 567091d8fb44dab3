//! Each example on its own route answers a 2026-07-28 `tools/list` with exactly its tools and
//! its own identity, and a legacy `initialize`.

use crate::common;

use common::TestServer;
use serde_json::json;
use std::sync::Arc;

use vercel_mcp::Parts;
use vercel_mcp::local::Routes;
use vercel_mcp::state::SystemClock;

#[tokio::test]
async fn every_example_route_serves_its_own_catalogue() {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let server = TestServer::start_routes(Routes::new(&config)).await;
    let expected = [
        ("minimal", "minimal-server", vec!["echo"]),
        ("async-jobs", "async-jobs-server", vec!["submit_job", "get_job_status", "get_job_result", "cancel_job"]),
        ("resources", "resources-server", vec![]),
        ("elicitation", "elicitation-server", vec!["book_meeting"]),
        ("sampling", "sampling-server", vec!["summarize"]),
        ("query-command", "query-command-server", vec!["list_items", "get_item", "create_item"]),
        ("secure-tools", "secure-tools-server", vec!["add_item"]),
        ("facade", "facade-server", vec!["weather_get", "directory_lookup"]),
        ("auth-server", "auth-server", vec!["whoami"]),
        // Authentication is off: the anonymous caller holds no scope, and the billing tools
        // authorize every call themselves, so none is advertised to it.
        ("least-privilege", "least-privilege-server", vec![]),
        ("db-adapter", "db-adapter-server", vec!["list_categories", "get_products_by_category"]),
        ("sandbox-isolation", "sandbox-isolation-server", vec!["run_in_sandbox"]),
    ];
    for (route, server_name, tools) in expected {
        let path = format!("/api/examples/{route}");
        let body =
            json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params": common::with_meta(json!({}))}).to_string();
        let reply = server
            .post_to(&path, body)
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/list")
            .send()
            .await;
        let result = &reply.json()["result"];
        let names: Vec<&str> =
            result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, tools, "{route}");
        assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], server_name);
        let legacy = server
            .post_to(
                &path,
                r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#,
            )
            .send()
            .await;
        assert_eq!(legacy.json()["result"]["serverInfo"]["name"], server_name, "{route}");
    }
    assert_eq!(server.post_to("/api/examples/nope", "{}").send().await.status, 404);
    let echo = server
        .post_to("/api/examples/minimal", json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": common::with_meta(json!({"name":"echo","arguments":{"message":"ping"}}))}).to_string())
        .header("MCP-Protocol-Version", "2026-07-28").header("Mcp-Method", "tools/call").header("Mcp-Name", "echo").send().await;
    assert_eq!(echo.json()["result"]["content"], json!([{"type":"text","text":"ping"}]));
    let bad = server
        .post_to("/api/examples/minimal", json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params": common::with_meta(json!({"name":"echo","arguments":{"message":42}}))}).to_string())
        .header("MCP-Protocol-Version", "2026-07-28").header("Mcp-Method", "tools/call").header("Mcp-Name", "echo").send().await;
    assert_eq!(bad.json()["result"]["isError"], true, "a non-string message is a tool error: {}", bad.text());
    let list = server
        .post_to(
            "/api/examples/minimal",
            json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params": common::with_meta(json!({}))}).to_string(),
        )
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .send()
        .await;
    let schema = &list.json()["result"]["tools"][0]["inputSchema"];
    assert_eq!(schema["properties"]["message"]["type"], "string");
    assert_eq!(schema["required"], json!(["message"]));
}

#[tokio::test]
async fn whoami_fails_closed_without_a_verified_token() {
    // Authentication off: every caller is anonymous, and whoami refuses rather than inventing
    // an identity; the token-bearing cases are in tests/it/auth.rs.
    let config = Parts::for_tests(Arc::new(SystemClock));
    let server = TestServer::start_routes(Routes::new(&config)).await;
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": common::with_meta(json!({"name":"whoami","arguments":{"principal":"sub:admin"}}))});
    let reply = server
        .post_to("/api/examples/auth-server", call.to_string())
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "whoami")
        .send()
        .await;
    // Refused: had the `principal` argument been taken as an identity, whoami would have answered.
    let text = common::error_text(&reply.json()["result"]);
    assert!(text.contains("unauthenticated"), "{text}");
}

/// One 2026-07-28 request to an example route; `name` goes in `Mcp-Name` when the method needs it.
async fn call_example(
    server: &TestServer,
    route: &str,
    method: &str,
    name: Option<&str>,
    params: serde_json::Value,
) -> common::Reply {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params": common::with_meta(params)}).to_string();
    let mut call = server
        .post_to(&format!("/api/examples/{route}"), body)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = name {
        call = call.header("Mcp-Name", name);
    }
    call.send().await
}

#[tokio::test]
async fn resources_example_reads_exact_uris_before_templates() {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let server = TestServer::start_routes(Routes::new(&config)).await;
    let read = |uri: &'static str| {
        let server = &server;
        async move { call_example(server, "resources", "resources/read", Some(uri), json!({"uri": uri})).await }
    };
    // B1, B2: exactly one resource and one template.
    let (resources, templates) = listed_notes(&server).await;
    assert_eq!(
        resources,
        json!([{"uri":"notes://welcome","name":"welcome-note","mimeType":"text/plain",
                "description":"Static direct resource: same content for every read."}])
    );
    assert_eq!(
        templates,
        json!([{"uriTemplate":"notes://{topic}","name":"topic-note","mimeType":"text/plain",
                "description":"Resource template: the {topic} segment is bound per read request."}])
    );
    // B3, B5: the exact registration wins over the template that also matches it.
    let welcome = read("notes://welcome").await.json();
    assert_eq!(
        welcome["result"]["contents"],
        json!([{"uri":"notes://welcome","mimeType":"text/plain","text":"Welcome to the resources-server example."}])
    );
    // B4: the template binds its variable per read.
    for (uri, text) in [("notes://mcp", "You asked about: mcp"), ("notes://lifecycle", "You asked about: lifecycle")] {
        let reply = call_example(&server, "resources", "resources/read", Some(uri), json!({"uri": uri})).await.json();
        assert_eq!(reply["result"]["contents"], json!([{"uri": uri, "mimeType": "text/plain", "text": text}]));
    }
    // N6: an unknown scheme is a protocol error naming the URI, not an isError result.
    let missing = read("other://nope").await;
    let error = &missing.json()["error"];
    assert_eq!(error["code"], -32602);
    assert!(error.to_string().contains("other://nope"), "{error}");
    assert!(missing.json().get("result").is_none());
    // N7: no tools capability, yet tools/list answers with an empty list.
    let discover = call_example(&server, "resources", "server/discover", None, json!({})).await.json();
    let capabilities = &discover["result"]["capabilities"];
    assert!(capabilities.get("tools").is_none() && capabilities.get("resources").is_some(), "{capabilities}");
    let tools = call_example(&server, "resources", "tools/list", None, json!({})).await.json();
    assert_eq!(tools["result"]["tools"], json!([]), "{tools}");
    // N8: reading a templated URI leaves the listings as they were.
    read("notes://ephemeral").await;
    assert_eq!(listed_notes(&server).await, (resources, templates));
}

/// The resources example's `resources/list` and `resources/templates/list` results.
async fn listed_notes(server: &TestServer) -> (serde_json::Value, serde_json::Value) {
    let resources = call_example(server, "resources", "resources/list", None, json!({})).await.json();
    let templates = call_example(server, "resources", "resources/templates/list", None, json!({})).await.json();
    (resources["result"]["resources"].clone(), templates["result"]["resourceTemplates"].clone())
}

/// The Origin check (O-1 … O-7, O-12 over HTTP) guards every example route, not only `/api/mcp`:
/// a refusal is a 403 that names the origin problem without echoing the allowlist, and the
/// request never reaches the example (a refused `tools/call` of `echo` returns no result).
#[tokio::test]
async fn every_example_route_checks_the_origin() {
    let config = Parts::from_lookup(
        |name| match name {
            "MCP_STATE_SECRET" => Some("test=0123456789abcdef0123456789abcdef".into()),
            "MCP_ALLOWED_ORIGINS" => Some("https://app.example/, null".into()),
            _ => None,
        },
        Arc::new(SystemClock),
    )
    .unwrap();
    let server = TestServer::start_routes(Routes::new(&config)).await;
    let mut routes: Vec<String> =
        vercel_mcp::catalogue::EXAMPLES.iter().map(|e| format!("/api/examples/{}", e.name)).collect();
    routes.push("/api/mcp".into());
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params": common::with_meta(json!({}))}).to_string();
    for route in &routes {
        let send = |origin: Option<&'static str>| {
            let mut call = server
                .post_to(route, body.clone())
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", "tools/list");
            if let Some(origin) = origin {
                call = call.header("Origin", origin);
            }
            call.send()
        };
        for refused in ["https://evil.example", "null", "not a url", "http://app.example", "https://app.example.evil"] {
            let reply = send(Some(refused)).await;
            assert_eq!(reply.status, 403, "{route} {refused}");
            assert!(reply.text().to_lowercase().contains("origin"), "{route}: {}", reply.text());
            assert!(!reply.text().contains("app.example"), "the allowlist is never echoed: {}", reply.text());
        }
        for allowed in [None, Some("https://app.example"), Some("HTTPS://APP.example")] {
            let reply = send(allowed).await;
            assert_eq!(reply.status, 200, "{route} {allowed:?}: {}", reply.text());
            assert!(reply.json()["result"]["tools"].is_array());
        }
    }
    let refused_call = server
        .post_to("/api/examples/minimal", json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": common::with_meta(json!({"name":"echo","arguments":{"message":"ping"}}))}).to_string())
        .header("MCP-Protocol-Version", "2026-07-28").header("Mcp-Method", "tools/call").header("Mcp-Name", "echo")
        .header("Origin", "https://evil.example").send().await;
    assert_eq!(refused_call.status, 403);
    assert_eq!(refused_call.text(), "Forbidden: Origin not allowed", "refused before any parsing or dispatch");
}

/// A resource read answers with the URI it was asked for; control characters in it come back
/// percent-encoded, never raw (a newline or an escape sequence would reach the model or a
/// terminal as the client wrote it).
#[tokio::test]
async fn a_read_never_echoes_raw_control_characters_in_the_uri() {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let server = TestServer::start(vercel_mcp::example_app("resources", &config).unwrap()).await;
    let uri = "notes://a\nb\u{1b}[31mc\u{85}d";
    let reply = server.modern(json!(1), "resources/read", json!({ "uri": uri })).send().await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let contents = &reply.json()["result"]["contents"][0];
    assert_eq!(contents["uri"], "notes://a%0Ab%1B[31mc%C2%85d");
    // The text quotes the topic as the URI shows it (before, raw: a newline and an escape).
    assert_eq!(contents["text"], "You asked about: a%0Ab%1B[31mc%C2%85d");
    let plain = server.modern(json!(2), "resources/read", json!({ "uri": "notes://mcp" })).send().await;
    assert_eq!(plain.json()["result"]["contents"][0]["uri"], "notes://mcp", "a clean URI is unchanged");
}

/// `/api/mcp` serves what `configure_server` lists, which starts small; the examples left out of
/// it are still served on their own routes.
#[tokio::test]
async fn api_mcp_serves_the_configured_list_and_every_example_keeps_its_route() {
    use vercel_mcp::client::{Client, ClientOptions};
    let parts = vercel_mcp::Parts::for_tests(std::sync::Arc::new(vercel_mcp::state::SystemClock));
    let names = |tools: Vec<vercel_mcp::protocol::types::Tool>| tools.into_iter().map(|t| t.name).collect::<Vec<_>>();
    let mcp = Client::in_process(vercel_mcp::mcp_app(&parts), ClientOptions::default()).await.unwrap();
    assert_eq!(
        names(mcp.list_tools().await.unwrap()),
        ["echo", "submit_job", "get_job_status", "get_job_result", "cancel_job", "whoami"]
    );
    let items = vercel_mcp::example_app("query-command", &parts).unwrap();
    let items = Client::in_process(items, ClientOptions::default()).await.unwrap();
    assert_eq!(names(items.list_tools().await.unwrap()), ["list_items", "get_item", "create_item"]);
}
