//! minimal-server: one `echo` tool, the stateless baseline every other example builds on.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::protocol::types::CallToolResult;
use crate::server::{McpServer, RequestContext, ToolDef, ToolError};

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    pub message: String,
}

/// Registers `echo`.
pub fn register(server: &mut McpServer) {
    server.tool(ToolDef::new("echo").description("Echo a message back to the caller."), echo);
}

async fn echo(_ctx: RequestContext, args: EchoArgs) -> Result<CallToolResult, ToolError> {
    Ok(CallToolResult::text(args.message))
}
