//! Outbound HTTP(S): the one client the server uses to call platform APIs (Vercel Queues).
//!
//! Built on first use, not at start-up, so functions that never call out pay nothing for TLS
//! setup. TLS is rustls with the `ring` provider and the webpki root store; plain `http://` is
//! allowed for loopback test doubles.

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::OnceLock;
use std::time::Duration;

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The largest response body read from a platform API.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// A response from a platform API.
#[derive(Debug)]
pub struct OutboundResponse {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body (at most 1 MiB).
    pub body: Bytes,
}

fn client() -> &'static HttpsClient {
    static CLIENT: OnceLock<HttpsClient> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .expect("the ring provider supports the default protocol versions")
            .https_or_http()
            .enable_http1()
            .build();
        Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(https)
    })
}

/// Sends `request` with an overall `timeout`. Errors are short descriptions without URLs or
/// headers (which may carry tokens).
pub async fn send(request: Request<Full<Bytes>>, timeout: Duration) -> Result<OutboundResponse, String> {
    let work = async {
        let response = client()
            .request(request)
            .await
            .map_err(|e| if e.is_connect() { "connection failed".to_owned() } else { "request failed".to_owned() })?;
        let (parts, body) = response.into_parts();
        let body =
            Limited::new(body, MAX_RESPONSE_BYTES).collect().await.map_err(|_| "response unreadable".to_owned())?;
        Ok(OutboundResponse { status: parts.status, headers: parts.headers, body: body.to_bytes() })
    };
    tokio::time::timeout(timeout, work).await.map_err(|_| "timed out".to_owned())?
}

/// Sends `request` and returns the response as soon as its head arrives, with the body left to
/// stream (SSE). The `timeout` bounds the wait for the head only.
pub async fn open(
    request: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let pending = client().request(request);
    match tokio::time::timeout(timeout, pending).await {
        Err(_) => Err("timed out".to_owned()),
        Ok(Err(e)) if e.is_connect() => Err("connection failed".to_owned()),
        Ok(Err(_)) => Err("request failed".to_owned()),
        Ok(Ok(response)) => Ok(response),
    }
}
