//! What the performance floors share (`floor.rs`, `floor_json.rs`, `floor_typed.rs`, `floor_redis.rs`): the local
//! run's way of serving (hyper's HTTP/1.1 with keep-alive, `TCP_NODELAY`, a task per connection)
//! and the echo answer they send. Each floor differs only in what it does between reading a
//! request's body and answering, so its cost beyond `floor.rs` is that work alone.

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Collected, Full};
use hyper_util::rt::TokioIo;
use std::future::Future;
use tokio::net::TcpListener;

/// The echo tool's answer, as the MCP server writes it.
pub const ECHO: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"floor","version":"1"}}}}"#;

/// Serves every request on `PORT` (3000 by default) of 127.0.0.1: reads its body, as a real server
/// must, and answers with the status and JSON body `answer` makes of it (`None` if it broke). The
/// body is handed over as read, so a floor that does not look at it pays nothing to join it.
pub async fn serve<A, F>(name: &str, answer: A) -> std::io::Result<()>
where
    A: Fn(Option<Collected<Bytes>>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = (http::StatusCode, Bytes)> + Send,
{
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000);
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("{name} listening on http://{}/", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let answer = answer.clone();
        tokio::spawn(async move {
            // Each request borrows the connection's `answer`, as the local run's requests borrow
            // its routes: nothing is cloned per request.
            let answer = &answer;
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| async move {
                let (status, body) = answer(request.into_body().collect().await.ok()).await;
                let mut response = http::Response::new(Full::new(body));
                *response.status_mut() = status;
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
