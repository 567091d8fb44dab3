//! Testing your own tools: a client for a configured server, in this process, without a socket.
//!
//! Requests go through the same transport a deployment runs (headers, `_meta`, MRTR, SSE), over
//! the local posture's parts: authentication off, stores in memory, a fixed sealing key.
//!
//! ```
//! # use vercel_mcp::server::{McpServer, ToolDef};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut server = McpServer::new("test", "1");
//! server.tool(ToolDef::new("ping").description("Answers pong."), |_, _: vercel_mcp::server::NoArguments| async { "pong" });
//! let client = vercel_mcp::testing::client(server).await;
//! assert_eq!(client.call_tool("ping", serde_json::json!({})).await.unwrap().joined_text(), "pong");
//! # }
//! ```

use std::sync::Arc;

use crate::client::{Client, ClientOptions};
use crate::compose::Parts;
use crate::server::McpServer;
use crate::state::SystemClock;
use crate::transport::App;

/// A client connected to `server`, served with the local posture's parts.
pub async fn client(server: McpServer) -> Client {
    client_with(server, &Parts::for_tests(Arc::new(SystemClock)), ClientOptions::default()).await
}

/// A client connected to `server`, served with `parts` (an authenticated setup, a manual clock,
/// shared stores) and speaking with `options` (elicitation handlers, a bearer token).
pub async fn client_with(server: McpServer, parts: &Parts, options: ClientOptions) -> Client {
    let app = Arc::new(App::new(server, parts.endpoint()));
    Client::in_process(app, options).await.expect("an in-process server answers server/discover")
}
