//! The floor of a request that needs one Redis round trip (a job submit or poll): the canned
//! server of `floor.rs`, making one `GET` to `FLOOR_REDIS` (default redis://127.0.0.1:6379)
//! before each answer, through the client and connection kind the job store uses. Against it
//! only our own work around the round trip is left; `docs/performance.md` ("Job path") uses it to
//! show what two shared cores allow. Kept apart from `floor.rs` so the floor's size and cold
//! start stay those of a server with nothing linked in.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"floor","version":"1"}}}}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000);
    let url = std::env::var("FLOOR_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url).map_err(std::io::Error::other)?;
    let redis = redis::aio::ConnectionManager::new(client).await.map_err(std::io::Error::other)?;
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("floor (one Redis GET a request) listening on http://{}/", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let redis = redis.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let redis = redis.clone();
                async move {
                    // Read the body, as a real server must, then answer.
                    let _ = request.into_body().collect().await;
                    let mut redis = redis;
                    let _: Option<Vec<u8>> =
                        redis::cmd("GET").arg("floor:key").query_async(&mut redis).await.ok().flatten();
                    let mut response = http::Response::new(Full::new(Bytes::from_static(BODY)));
                    response
                        .headers_mut()
                        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
