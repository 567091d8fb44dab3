//! `/.well-known/oauth-protected-resource` (and `/.well-known/oauth-protected-resource/api/mcp`):
//! the protected-resource metadata, routed here by `vercel.json` rewrites.

#[tokio::main]
async fn main() -> Result<(), vercel_runtime::Error> {
    vercel_mcp::vercel::serve_metadata(&vercel_mcp::parts_or_exit()).await
}
