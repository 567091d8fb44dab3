//! Outbound HTTP(S): the one client the server uses to call out (Vercel Queues, the Sandbox API,
//! JWKS, OTLP exports, the MCP client).
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

/// Whether `url` may carry a credential: https, or plain http to a loopback host (a test double
/// on this machine). Decided on the parsed host, not on a prefix: `http://localhost.evil.example`
/// is not loopback.
pub fn encrypted_or_loopback(url: &str) -> bool {
    let Ok(parsed) = url::Url::parse(url) else { return false };
    parsed.scheme() == "https" || (parsed.scheme() == "http" && is_loopback(&parsed))
}

/// Whether `url` names this machine (`localhost`, or a loopback address).
pub fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        // A scheme the URL standard does not know (`redis:`) keeps its host as text, addresses
        // included.
        Some(url::Host::Domain(name)) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Sends `request` with an overall `timeout`. Errors are short descriptions without URLs or
/// headers (which may carry tokens).
pub async fn send(mut request: Request<Full<Bytes>>, timeout: Duration) -> Result<OutboundResponse, String> {
    let span = traced(&mut request);
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
    let outcome = tokio::time::timeout(timeout, work).await.map_err(|_| "timed out".to_owned()).and_then(|r| r);
    settle(&span, outcome.as_ref().map(|response| response.status));
    outcome
}

/// The request's CLIENT span (when a traced request or job is making it), its `traceparent`
/// sent onward to a host `MCP_TRACE_PROPAGATE_HOSTS` names, and to no other.
fn traced(request: &mut Request<Full<Bytes>>) -> crate::telemetry::SpanHandle {
    let host = request.uri().host().unwrap_or_default().to_owned();
    let span = crate::telemetry::outbound_span(request.method().as_str(), &host);
    if let Some(value) = span.traceparent_for(&host).and_then(|t| http::HeaderValue::from_str(&t).ok()) {
        request.headers_mut().insert("traceparent", value);
    }
    span
}

/// Ends an outbound request's span with its status, or as failed.
fn settle(span: &crate::telemetry::SpanHandle, status: Result<StatusCode, &String>) {
    match status {
        Ok(status) => {
            span.set([opentelemetry::KeyValue::new("http.response.status_code", i64::from(status.as_u16()))]);
            if status.is_server_error() {
                span.fail("http_error");
            }
        }
        Err(_) => span.fail("request_failed"),
    }
    span.end();
}

/// Sends `request` and returns the response as soon as its head arrives, with the body left to
/// stream (SSE). The `timeout` bounds the wait for the head only.
pub async fn open(
    mut request: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let span = traced(&mut request);
    let pending = client().request(request);
    let outcome = match tokio::time::timeout(timeout, pending).await {
        Err(_) => Err("timed out".to_owned()),
        Ok(Err(e)) if e.is_connect() => Err("connection failed".to_owned()),
        Ok(Err(_)) => Err("request failed".to_owned()),
        Ok(Ok(response)) => Ok(response),
    };
    settle(&span, outcome.as_ref().map(|response| response.status()));
    outcome
}
