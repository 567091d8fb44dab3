//! The performance floor: a canned-response HTTP server (hyper, same runtime and socket options
//! as the local run) that answers every POST with a fixed JSON-RPC body. Everything the MCP
//! server does beyond this is the cost of MCP; ratios against it cancel machine noise.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"floor","version":"1"}}}}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000);
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("floor listening on http://{}/", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|request: http::Request<hyper::body::Incoming>| async move {
                // Read the body, as a real server must, then answer.
                let _ = request.into_body().collect().await;
                let mut response = http::Response::new(Full::new(Bytes::from_static(BODY)));
                response
                    .headers_mut()
                    .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                Ok::<_, std::convert::Infallible>(response)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
