//! The least a JSON-RPC server does beyond the floor (`floor.rs`): read the body as a JSON
//! `Value`, take the request's `id` and its echo argument, and write a JSON response holding them.
//! No header checks, no validation, no log line, no dispatch. What the MCP server costs beyond
//! this is the cost of its own work; what this costs beyond the floor is the cost of reading and
//! writing JSON at all.

#[path = "support/floors.rs"]
mod floors;

use bytes::Bytes;
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    floors::serve("floor_json", |body: Option<http_body_util::Collected<Bytes>>| async move {
        match serde_json::from_slice::<Value>(&body.map(|body| body.to_bytes()).unwrap_or_default()) {
            Ok(message) => (http::StatusCode::OK, echo(&message)),
            Err(_) => (http::StatusCode::BAD_REQUEST, Bytes::from_static(br#"{"error":"not JSON"}"#)),
        }
    })
    .await
}

/// The echo tool's answer, built as a `Value` and written out, as a small server would.
fn echo(message: &Value) -> Bytes {
    let text = message.pointer("/params/arguments/message").cloned().unwrap_or(Value::Null);
    let response = json!({
        "jsonrpc": "2.0",
        "id": message.get("id").cloned().unwrap_or(Value::Null),
        "result": {
            "content": [{"type": "text", "text": text}],
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "floor_json", "version": "1"}},
        },
    });
    Bytes::from(serde_json::to_vec(&response).unwrap_or_default())
}
