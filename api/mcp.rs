//! `/api/mcp`: the MCP endpoint as a Vercel Function.

#[tokio::main]
async fn main() -> Result<(), vercel_runtime::Error> {
    vercel_mcp::vercel::serve_mcp(&vercel_mcp::parts_or_exit()).await
}
