//! `/api/mcp`: the MCP endpoint as a Vercel Function.

#[tokio::main]
async fn main() -> Result<(), vercel_runtime::Error> {
    let config = vercel_mcp::config_or_exit();
    vercel_mcp::vercel::serve_mcp(vercel_mcp::mcp_app(&config)).await
}
