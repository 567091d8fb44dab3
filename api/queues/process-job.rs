//! `/api/queues/process-job`: the jobs queue consumer, invoked only by its Vercel Queues trigger.

#[tokio::main]
async fn main() -> Result<(), vercel_runtime::Error> {
    vercel_mcp::vercel::serve_consumer(&vercel_mcp::parts_or_exit()).await
}
