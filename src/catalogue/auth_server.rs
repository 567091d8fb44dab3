//! auth-server: `whoami`, the scope-gated tool that shows who the verified token says the caller
//! is. Identity is never caller-supplied: the tool takes no arguments.

use serde_json::json;

use crate::protocol::types::CallToolResult;
use crate::server::{McpServer, NoArguments, RequestContext, ToolDef, ToolError};

/// The scope `whoami` needs.
pub const WHOAMI_SCOPE: &str = super::READ_SCOPE;

/// Registers `whoami`.
pub fn register(server: &mut McpServer) {
    server.tool(
        ToolDef::new("whoami")
            .description("Report the caller's identity as established by the access token.")
            .scopes(&[WHOAMI_SCOPE]),
        whoami,
    );
}

async fn whoami(ctx: RequestContext, _: NoArguments) -> Result<CallToolResult, ToolError> {
    let principal = ctx.principal();
    if !principal.is_verified() {
        return Err(ToolError::Execution("unauthenticated: whoami needs a verified access token".into()));
    }
    // Re-checked here as well as before dispatch (defence in depth).
    if !principal.has_scopes(&[WHOAMI_SCOPE]) {
        return Err(ToolError::Execution(format!("insufficient scope: whoami requires {WHOAMI_SCOPE}")));
    }
    let payload =
        json!({ "principal": principal.id(), "clientId": principal.client_id(), "scopes": principal.scopes() });
    Ok(CallToolResult::text(payload.to_string()))
}
