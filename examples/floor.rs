//! The performance floor: a canned-response HTTP server (hyper, same runtime and socket options
//! as the local run) that answers every POST with a fixed JSON-RPC body. Everything the MCP
//! server does beyond this is the cost of MCP; ratios against it cancel machine noise.

#[path = "support/floors.rs"]
mod floors;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    floors::serve("floor", |_body| async { (http::StatusCode::OK, bytes::Bytes::from_static(floors::ECHO)) }).await
}
