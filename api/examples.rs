//! `/api/examples/<name>`: each reference example on its own route, all from one function.

#[tokio::main]
async fn main() -> Result<(), vercel_runtime::Error> {
    vercel_mcp::vercel::serve_examples(&vercel_mcp::parts_or_exit()).await
}
