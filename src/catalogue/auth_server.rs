//! auth-server: `whoami`, the scope-gated tool that shows who the verified token says the caller
//! is. Identity is never caller-supplied: the tool takes no arguments.
//!
//! Each successful call leaves one audit entry, `{clientId, tool}`, as a `tool_audit` log line
//! (a log drain ships it off the instance; instance memory is not an audit store). Denials, at
//! the route or in the handler, leave none.

use serde_json::json;

use crate::observe::Logger;
use crate::protocol::types::CallToolResult;
use crate::server::{McpServer, NoArguments, RequestContext, ToolDef, ToolError};

/// The scope `whoami` needs.
pub const WHOAMI_SCOPE: &str = super::READ_SCOPE;

/// Registers `whoami`, auditing successful calls through `audit`.
pub fn register(server: &mut McpServer, audit: Logger) {
    server.with_state(audit).tool(
        ToolDef::new("whoami")
            .description("Report the caller's identity as established by the access token.")
            .scopes(&[WHOAMI_SCOPE]),
        |ctx: RequestContext, audit: Logger, _: NoArguments| async move { whoami(&ctx, &audit) },
    );
}

fn whoami(ctx: &RequestContext, audit: &Logger) -> Result<CallToolResult, ToolError> {
    let principal = ctx.principal();
    if !principal.is_verified() {
        return Err(ToolError::Execution("unauthenticated: whoami needs a verified access token".into()));
    }
    // Re-checked here as well as before dispatch (defence in depth).
    if !principal.has_scopes(&[WHOAMI_SCOPE]) {
        return Err(ToolError::Execution(format!("insufficient scope: whoami requires {WHOAMI_SCOPE}")));
    }
    // The reference's audit entry names the client (the application, not its user) as its token
    // does; the one raw identity in any log line, so cut and escaped like other quoted text.
    let client = principal.client_id().map(crate::protocol::error::truncate_for_message);
    audit.event("info", "tool_audit", json!({ "clientId": client, "tool": "whoami" }));
    Ok(CallToolResult::text(json!({ "clientId": principal.client_id(), "scopes": principal.scopes() }).to_string()))
}
