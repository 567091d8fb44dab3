//! Stand-ins for the platform APIs the server calls (Vercel Queues, the Sandbox API, a JWKS
//! endpoint): a loopback HTTP/1.1 server whose answers come from a closure.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// One request as the stand-in saw it.
pub struct Seen {
    pub method: http::Method,
    /// Path and query.
    pub target: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Seen {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
    }
    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

/// Serves `respond` (status and body for each request) on a free loopback port.
pub async fn serve<F, Fut>(respond: F) -> SocketAddr
where
    F: Fn(Seen) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = (u16, Bytes)> + Send + 'static,
{
    let respond = Arc::new(respond);
    serve_typed(move |seen| {
        let answer = respond(seen);
        async move {
            let (status, body) = answer.await;
            (status, None, body)
        }
    })
    .await
}

/// [`serve`], with a `Content-Type` of the closure's choosing (`text/event-stream` for a stream).
pub async fn serve_typed<F, Fut>(respond: F) -> SocketAddr
where
    F: Fn(Seen) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = (u16, Option<&'static str>, Bytes)> + Send + 'static,
{
    let respond = Arc::new(respond);
    serve_with_headers(move |seen| {
        let answer = respond(seen);
        async move {
            let (status, content_type, body) = answer.await;
            (status, content_type.map(|t| vec![("content-type", t.to_owned())]).unwrap_or_default(), body)
        }
    })
    .await
}

/// A response header [`serve_with_headers`] does not send: it sends the body and then cuts the
/// connection, as a proxy dropping it midway does, instead of ending the response.
pub const CUT_AFTER_BODY: &str = "x-stand-in-cut";

/// [`serve`], with the response headers of the closure's choosing.
pub async fn serve_with_headers<F, Fut>(respond: F) -> SocketAddr
where
    F: Fn(Seen) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = (u16, Vec<(&'static str, String)>, Bytes)> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let respond = respond.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let respond = respond.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let target = parts.uri.path_and_query().map_or_else(String::new, |p| p.to_string());
                        let seen = Seen { method: parts.method, target, headers: parts.headers, body };
                        let (status, headers, body) = respond(seen).await;
                        let mut response = http::Response::builder().status(status);
                        let mut cut = false;
                        for (name, value) in headers {
                            if name == CUT_AFTER_BODY {
                                cut = true;
                                continue;
                            }
                            response = response.header(name, value);
                        }
                        let body = if cut {
                            use futures_util::StreamExt;
                            // The cut comes a moment later, once what came before it is on its way.
                            let cut = futures_util::stream::once(async {
                                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                                Err("cut")
                            });
                            let frames = futures_util::stream::iter([Ok(hyper::body::Frame::data(body))]).chain(cut);
                            BodyExt::boxed(http_body_util::StreamBody::new(frames))
                        } else {
                            Full::new(body).map_err(|never| match never {}).boxed()
                        };
                        let response = response.body(body).unwrap();
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}
