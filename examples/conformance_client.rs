//! The conformance client: runs the official suite's client scenarios with this crate's MCP
//! client, built only from the public API.
//!
//! The suite starts it as `conformance_client <server-url>` with the scenario in
//! `MCP_CONFORMANCE_SCENARIO` (and extra input in `MCP_CONFORMANCE_CONTEXT`).

use serde_json::{Map, Value, json};

use vercel_mcp::client::{Client, ClientError, ClientOptions};

fn options() -> ClientOptions {
    ClientOptions { name: "conformance-test-client".into(), version: "1.0.0".into(), ..ClientOptions::default() }
        .handler("elicitation/create", |_| async {
            Ok(json!({ "action": "accept", "content": { "confirmed": true } }))
        })
}

fn call_params(name: &str, arguments: Value) -> Map<String, Value> {
    let mut params = Map::new();
    params.insert("name".into(), json!(name));
    params.insert("arguments".into(), arguments);
    params
}

/// The MRTR sequence: a state-carrying round trip with an unrelated call in between, a
/// stateless one, and a result without `resultType` (which counts as complete).
async fn request_state(client: &Client) -> Result<(), ClientError> {
    client.list_tools().await?;
    let first = client.request("tools/call", call_params("test_mrtr_echo_state", json!({}))).await?;
    client.request("tools/call", call_params("test_mrtr_unrelated", json!({}))).await?;
    let mut retry = call_params("test_mrtr_echo_state", json!({}));
    retry.insert("inputResponses".into(), answers(&first));
    if let Some(state) = first.get("requestState") {
        retry.insert("requestState".into(), state.clone());
    }
    client.request("tools/call", retry).await?;
    let first = client.request("tools/call", call_params("test_mrtr_no_state", json!({}))).await?;
    let mut retry = call_params("test_mrtr_no_state", json!({}));
    retry.insert("inputResponses".into(), answers(&first));
    if let Some(state) = first.get("requestState") {
        retry.insert("requestState".into(), state.clone());
    }
    client.request("tools/call", retry).await?;
    client.request("tools/call", call_params("test_mrtr_no_result_type", json!({}))).await?;
    Ok(())
}

fn answers(result: &Value) -> Value {
    let keys = result
        .get("inputRequests")
        .and_then(Value::as_object)
        .map(|r| r.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    Value::Object(
        keys.into_iter().map(|k| (k, json!({ "action": "accept", "content": { "confirmed": true } }))).collect(),
    )
}

async fn standard_headers(client: &Client) -> Result<(), ClientError> {
    let tools = client.list_tools().await?;
    if let Some(tool) = tools.first() {
        client.call_tool(&tool.name, json!({})).await?;
    }
    let resources = client.request("resources/list", Map::new()).await?;
    if let Some(uri) =
        resources.get("resources").and_then(|r| r.get(0)).and_then(|r| r.get("uri")).and_then(Value::as_str)
    {
        let mut params = Map::new();
        params.insert("uri".into(), json!(uri));
        client.request("resources/read", params).await?;
    }
    let prompts = client.request("prompts/list", Map::new()).await?;
    if let Some(name) =
        prompts.get("prompts").and_then(|p| p.get(0)).and_then(|p| p.get("name")).and_then(Value::as_str)
    {
        let mut params = Map::new();
        params.insert("name".into(), json!(name));
        client.request("prompts/get", params).await?;
    }
    Ok(())
}

async fn custom_headers(client: &Client) -> Result<(), ClientError> {
    client.list_tools().await?;
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    for call in context.get("toolCalls").and_then(Value::as_array).cloned().unwrap_or_default() {
        let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
        client.call_tool(name, call.get("arguments").cloned().unwrap_or(json!({}))).await?;
    }
    Ok(())
}

async fn run(scenario: &str, url: &str) -> Result<(), ClientError> {
    let client = Client::connect(url, options()).await?;
    match scenario {
        "tools_call" | "tools-call" => {
            client.list_tools().await?;
            client.call_tool("add_numbers", json!({ "a": 2, "b": 3 })).await?;
        }
        "request-metadata" => {
            client.list_tools().await?;
        }
        "sep-2322-client-request-state" => request_state(&client).await?,
        "http-standard-headers" => standard_headers(&client).await?,
        "http-custom-headers" => custom_headers(&client).await?,
        "http-invalid-tool-headers" => {
            // Tools with invalid x-mcp-header annotations are dropped by list_tools.
            for tool in client.list_tools().await? {
                client.call_tool(&tool.name, json!({ "region": "us-west1" })).await?;
            }
        }
        "json-schema-ref-no-deref" => {
            // Listing must not fetch network $refs; the client never dereferences schemas.
            client.list_tools().await?;
        }
        other => return Err(ClientError::Protocol(format!("unknown scenario {other}"))),
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let url = std::env::args().next_back().filter(|a| a.starts_with("http")).unwrap_or_else(|| {
        eprintln!("usage: MCP_CONFORMANCE_SCENARIO=<name> conformance_client <server-url>");
        std::process::exit(2);
    });
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    if let Err(error) = run(&scenario, &url).await {
        eprintln!("conformance client ({scenario}): {error}");
        std::process::exit(1);
    }
}
