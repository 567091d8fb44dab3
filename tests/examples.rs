//! Each example on its own route answers a 2026-07-28 `tools/list` with exactly its tools and
//! its own identity, and a legacy `initialize`.

mod common;

use common::TestServer;
use serde_json::json;
use std::sync::Arc;

use vercel_mcp::Config;
use vercel_mcp::local::Routes;
use vercel_mcp::state::SystemClock;

#[tokio::test]
async fn every_example_route_serves_its_own_catalogue() {
    let config = Config::for_tests(Arc::new(SystemClock));
    let server = TestServer::start_routes(Routes::new(&config)).await;
    let expected = [
        ("minimal", "minimal-server", vec!["echo"]),
        ("async-jobs", "async-jobs-server", vec!["submit_job", "get_job_status", "get_job_result", "cancel_job"]),
        ("auth-server", "auth-server", vec!["whoami"]),
        ("least-privilege", "least-privilege-server", vec!["read_invoice", "issue_refund"]),
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
}

#[tokio::test]
async fn whoami_fails_closed_without_a_verified_token() {
    // Authentication off: every caller is anonymous, and whoami refuses rather than inventing
    // an identity; the token-bearing cases are in tests/auth.rs.
    let config = Config::for_tests(Arc::new(SystemClock));
    let server = TestServer::start_routes(Routes::new(&config)).await;
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": common::with_meta(json!({"name":"whoami","arguments":{"principal":"sub:admin"}}))});
    let reply = server
        .post_to("/api/examples/auth-server", call.to_string())
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "whoami")
        .send()
        .await;
    let text = common::error_text(&reply.json()["result"]);
    assert!(text.contains("unauthenticated"), "{text}");
    assert!(!text.contains("admin"), "a principal argument is never an identity");
}
