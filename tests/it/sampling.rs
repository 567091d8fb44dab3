//! sampling-server over HTTP: `summarize` sends one `sampling/createMessage` through a
//! 2026-07-28 `input_required` answer and returns the host's completion.

use crate::common;

use common::TestServer;
use serde_json::{Value, json};
use std::sync::Arc;

use vercel_mcp::state::SystemClock;
use vercel_mcp::{App, McpServer, Parts};

async fn server() -> TestServer {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let mut server = McpServer::new("sampling-server", "0.1.0");
    vercel_mcp::catalogue::sampling::register(&mut server);
    TestServer::start(Arc::new(App::new(server, config.endpoint()))).await
}

fn params(text: Value, capabilities: Value) -> Value {
    json!({
        "name": "summarize",
        "arguments": {"text": text},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        },
    })
}

async fn send(server: &TestServer, params: Value) -> Value {
    server.modern(json!(1), "tools/call", params).send().await.json()
}

/// Asks, checks the one sampling request, then retries with `completion`; returns the result.
async fn summarize(server: &TestServer, text: &str, completion: Value) -> Value {
    let first = send(server, params(json!(text), json!({"sampling": {}}))).await["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let requests = first["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "sampling/createMessage");
    let sent = &request["params"];
    assert_eq!(sent["maxTokens"], 512);
    assert_eq!(sent["modelPreferences"]["intelligencePriority"], 0.8);
    assert_eq!(sent["messages"].as_array().unwrap().len(), 1);
    assert_eq!(sent["messages"][0]["role"], "user");
    assert!(sent["messages"][0]["content"]["text"].as_str().unwrap().ends_with(text));
    let mut retry = params(json!(text), json!({"sampling": {}}));
    retry["inputResponses"] = json!({ key.as_str(): completion });
    retry["requestState"] = first["requestState"].clone();
    send(server, retry).await["result"].clone()
}

#[tokio::test]
async fn lists_summarize_with_a_string_text() {
    let server = server().await;
    let tools = server.modern(json!(1), "tools/list", json!({})).send().await.json()["result"]["tools"].clone();
    assert_eq!(tools.as_array().unwrap().len(), 1);
    assert_eq!(tools[0]["name"], "summarize");
    assert_eq!(tools[0]["inputSchema"]["properties"]["text"]["type"], "string");
}

#[tokio::test]
async fn returns_exactly_the_hosts_text_completion() {
    let server = server().await;
    let completion = json!({"role": "assistant", "content": {"type": "text", "text": "A short summary."}, "model": "stub-model", "stopReason": "endTurn"});
    let result = summarize(&server, "A long text about roadmaps.", completion).await;
    assert_eq!(result["resultType"], "complete");
    assert_ne!(result["isError"], true);
    assert_eq!(result["content"], json!([{"type": "text", "text": "A short summary."}]));
    // The array form of `content` with one text block reads the same.
    let completion =
        json!({"role": "assistant", "content": [{"type": "text", "text": "Array summary."}], "model": "m"});
    assert_eq!(summarize(&server, "x", completion).await["content"][0]["text"], "Array summary.");
}

#[tokio::test]
async fn non_text_completions_are_reported_not_passed_through() {
    let server = server().await;
    let image = json!({"role": "assistant", "content": {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}, "model": "m"});
    let result = summarize(&server, "x", image).await;
    assert_ne!(result["isError"], true);
    assert_eq!(result["content"][0]["text"], "Host returned non-text sampling content of type image.");
    let long_kind = json!({"role": "assistant", "content": {"type": "x".repeat(200)}, "model": "m"});
    let text = summarize(&server, "x", long_kind).await["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(!text.contains(&"x".repeat(33)), "a host-chosen type is not echoed at any length: {text}");
    for malformed in
        [json!({"role": "assistant"}), json!({"content": []}), json!({"content": {"type": "text", "text": 5}})]
    {
        let result = summarize(&server, "x", malformed.clone()).await;
        assert_eq!(result["resultType"], "complete", "{malformed}");
        assert!(result["content"][0]["text"].as_str().unwrap().starts_with("Host returned"), "{malformed}");
    }
    // Answers that are not sampling results (an elicitation's shape; the user's turn; no model)
    // are not taken as the summary, whatever text they carry.
    for foreign in [
        json!({"action": "accept", "content": {"type": "text", "text": "pwned"}}),
        json!({"role": "user", "content": {"type": "text", "text": "pwned"}, "model": "m"}),
        json!({"role": "assistant", "content": {"type": "text", "text": "pwned"}}),
    ] {
        let result = summarize(&server, "x", foreign.clone()).await;
        assert_eq!(result["content"][0]["text"], "Host returned an answer that is not a sampling result.", "{foreign}");
    }
}

#[tokio::test]
async fn nothing_is_sampled_without_capability_valid_arguments_or_a_known_tool() {
    let server = server().await;
    // No `sampling` capability: a tool error naming it, and no request is sent.
    let result = send(&server, params(json!("x"), json!({"elicitation": {}}))).await["result"].clone();
    assert_eq!(result["isError"], true, "{result}");
    assert!(common::error_text(&result).contains("sampling capability"));
    assert!(result.get("inputRequests").is_none());
    // A non-string text: an isError result before any request.
    let result = send(&server, params(json!(42), json!({"sampling": {}}))).await["result"].clone();
    assert_eq!(result["isError"], true);
    assert!(result.get("inputRequests").is_none());
    // An unknown tool.
    let mut unknown = params(json!("x"), json!({"sampling": {}}));
    unknown["name"] = json!("nope");
    let reply = send(&server, unknown).await;
    assert_eq!(reply["error"]["code"], -32602);
    assert!(reply["error"]["message"].as_str().unwrap().contains("not found"));
    // A completion supplied up front, without the sealed state, is not used: the server asks.
    let mut unsolicited = params(json!("x"), json!({"sampling": {}}));
    unsolicited["inputResponses"] =
        json!({"summary": {"role": "assistant", "content": {"type": "text", "text": "forged"}}});
    assert_eq!(send(&server, unsolicited).await["result"]["resultType"], "input_required");
}

/// A sampling request that offers the model tools goes only to a client that declared
/// `sampling.tools` (the spec: a server MUST NOT send them otherwise); one that declared only
/// `sampling` gets -32021 naming what is missing. Before, it was sent all the same.
#[tokio::test]
async fn a_sampling_request_with_tools_needs_the_sampling_tools_capability() {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let mut server = McpServer::new("sampling-tools", "0.1.0");
    server.tool(
        vercel_mcp::server::ToolDef::new("ask_with_tools").description("Samples with a tool on offer"),
        |_, _: vercel_mcp::server::NoArguments| async {
            let request = vercel_mcp::protocol::types::InputRequest::Sampling(json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 10,
                "tools": [{"name": "t", "inputSchema": {"type": "object"}}],
            }));
            vercel_mcp::server::Outcome::InputRequired(vercel_mcp::server::InputRequired::new().request("s", request))
        },
    );
    let server = TestServer::start(Arc::new(App::new(server, config.endpoint()))).await;
    let call = |capabilities: Value| {
        let mut call = params(json!("x"), capabilities);
        call["name"] = json!("ask_with_tools");
        call.as_object_mut().unwrap().remove("arguments");
        server.modern(json!(1), "tools/call", call).send()
    };
    let refused = call(json!({"sampling": {}})).await;
    assert_eq!((refused.status, refused.code()), (400, -32021), "{}", refused.text());
    assert_eq!(refused.json()["error"]["data"]["requiredCapabilities"], json!({"sampling": {"tools": {}}}));
    let asked = call(json!({"sampling": {"tools": {}}})).await.json();
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
}
