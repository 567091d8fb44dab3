//! The performance fixture: what `configure_server` serves plus tools for each benchmark workload
//! (filler tools up to a 50-tool list, a tool streaming 10 progress notifications, an MRTR
//! tool), served through the local run's router or, with `PERF_EDGE=vercel`, through the
//! `vercel_runtime` edge exactly as `api/mcp.rs` serves it. Configuration comes from the
//! environment like every binary of the project.

use serde_json::json;
use std::sync::Arc;

use vercel_mcp::protocol::types::{CallToolResult, InputRequest};
use vercel_mcp::security::Principal;
use vercel_mcp::server::{InputRequired, McpServer, NoArguments, Outcome, ToolDef};
use vercel_mcp::{App, local};

fn register_workload_tools(server: &mut McpServer) {
    server.tool(
        ToolDef::new("progress10").description("Reports ten progress steps, then answers"),
        |ctx, _: NoArguments| async move {
            for step in 1..=10 {
                ctx.progress(f64::from(step), Some(10.0), None).await;
            }
            CallToolResult::text("done")
        },
    );
    server.tool(
        ToolDef::new("confirm").description("One MRTR round: asks, then answers"),
        |ctx, _: NoArguments| async move {
            if ctx.request_state().is_some() && ctx.input_response("ok").is_some() {
                return Outcome::Complete(CallToolResult::text("confirmed"));
            }
            let request = InputRequest::ElicitForm {
                message: "OK?".into(),
                requested_schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
            };
            Outcome::InputRequired(InputRequired::new().request("ok", request).state(json!({"step": 1})))
        },
    );
    let mut n = 0;
    // Fifty in the list an anonymous caller gets (some catalogue tools are shown only to callers
    // holding their scopes).
    while server.listed_tools(&Principal::anonymous()).count() < 50 {
        n += 1;
        server.tool(
            ToolDef::new(format!("filler_{n:02}")).description("A tool that exists to make the list realistic"),
            |_, _: NoArguments| async { CallToolResult::text("ok") },
        );
    }
}

fn main() -> Result<(), vercel_runtime::Error> {
    // Each edge on the runtime it has in production: the local run's, and api/mcp.rs's `#[tokio::main]`.
    let vercel = std::env::var("PERF_EDGE").as_deref() == Ok("vercel");
    let runtime =
        if vercel { tokio::runtime::Builder::new_multi_thread().enable_all().build()? } else { local::runtime()? };
    runtime.block_on(async {
        let config = vercel_mcp::parts_or_exit();
        let mut server = McpServer::new("perf", vercel_mcp::VERSION);
        vercel_mcp::configure_server(&mut server, &config);
        register_workload_tools(&mut server);
        let app = Arc::new(App::new(server, config.endpoint()));
        if vercel {
            return vercel_mcp::vercel::serve_app(&config, app).await;
        }
        let routes = local::Routes::with_mcp(app).with_jobs(&config);
        routes.start_background_work();
        local::serve(routes, local::port_from_env()?).await?;
        Ok(())
    })
}
