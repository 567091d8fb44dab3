//! `/api/cron/sweep-jobs`: the job sweep, run by Vercel Cron with `Authorization: Bearer $CRON_SECRET`.

#[tokio::main]
async fn main() -> Result<(), vercel_runtime::Error> {
    vercel_mcp::vercel::serve_sweep(&vercel_mcp::parts_or_exit()).await
}
