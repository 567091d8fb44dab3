//! Testing your own tools: a client for a configured server, in this process, without a socket.
//!
//! Requests go through the same transport a deployment runs (headers, `_meta`, MRTR, SSE), over
//! the local posture's parts: stores in memory, a fixed sealing key, and authentication off
//! ([`client`]) or on with a signed-in caller ([`client_as`]).
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
use crate::state::{Clock, SystemClock};
use crate::transport::App;

/// The issuer and shared secret of [`client_as`]'s tokens (local development signing only:
/// deployments refuse `MCP_AUTH_HS256_SECRET`).
const ISSUER: &str = "https://issuer.test";
const SECRET: &str = "testing-only-hs256-secret-of-32-bytes";

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

/// A client calling `server` as `subject` holding `scopes`, with authentication required: tool
/// scopes are enforced, and a tool missing one is refused with 403 `insufficient_scope`.
pub async fn client_as(server: McpServer, subject: &str, scopes: &[&str]) -> Client {
    let settings = |name: &str| match name {
        "MCP_AUTH_MODE" => Some("required".to_owned()),
        "MCP_AUTH_HS256_SECRET" => Some(SECRET.to_owned()),
        "MCP_AUTH_ISSUER" => Some(ISSUER.to_owned()),
        "MCP_STATE_SECRET" => Some("testing=0123456789abcdef0123456789abcdef".to_owned()),
        _ => None,
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let parts = Parts::from_lookup(settings, clock.clone()).expect("the testing settings are valid");
    let now = clock.now_ms() / 1000;
    let claims = serde_json::json!({
        "iss": ISSUER,
        "aud": parts.settings.auth.config().resource.url(),
        "sub": subject,
        "scope": scopes.join(" "),
        "iat": now,
        "exp": now + 600,
    });
    let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes());
    let token = jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).expect("HS256 signs");
    let options = ClientOptions::default().header("Authorization", &format!("Bearer {token}"));
    client_with(server, &parts, options).await
}
