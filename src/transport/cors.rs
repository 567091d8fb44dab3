//! CORS for the MCP endpoint: how an allowed origin's preflight is answered and which headers a
//! browser may send and read.
//!
//! The Origin policy itself is [`crate::security::AllowedOrigins`]; this file only renders its
//! decision. A refused origin gets the plain 403 and no CORS header at all, so a browser page on
//! that origin can neither send the request nor read the refusal.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use super::Body;

/// Request headers a browser client may send (beyond the CORS-safelisted ones): MCP's and auth's,
/// W3C trace context, `Last-Event-ID` (a 2025-11-25 client resuming its stream), and Vercel's
/// `x-vercel-protection-bypass` (a preview behind Deployment Protection). Every
/// `Mcp-Param-{Name}` a preflight asks for is allowed too; CORS has no prefix wildcard.
pub const ALLOWED_REQUEST_HEADERS: &str = "Content-Type, Authorization, MCP-Protocol-Version, Mcp-Method, Mcp-Name, \
     Mcp-Session-Id, Last-Event-ID, traceparent, tracestate, baggage, x-vercel-protection-bypass";
/// Methods a browser client may send. Only `POST` is served; `GET` and `DELETE` are allowed
/// through the preflight so that a 2025-11-25 client (which opens a stream with `GET` and ends
/// its session with `DELETE`) reads the 405 it handles, rather than a network error it does not.
pub const ALLOWED_METHODS: &str = "GET, POST, DELETE";
/// Response headers a browser client may read: the auth challenge, the legacy session id and
/// the request id to quote in a bug report.
pub const EXPOSED_RESPONSE_HEADERS: &str = "WWW-Authenticate, Mcp-Session-Id, x-mcp-request-id";
/// How long a browser may reuse a preflight answer, in seconds.
pub const PREFLIGHT_MAX_AGE: &str = "600";
/// How many `Mcp-Param-*` names one preflight may have allowed back (a tool has few; the cap
/// keeps the answer small whatever the request asks).
const MAX_PARAM_HEADERS: usize = 32;

/// The answer to `OPTIONS` from an allowed origin (or from no origin, which is not a CORS
/// preflight and only learns the allowed methods).
pub fn preflight(origin: Option<&HeaderValue>, request: &HeaderMap) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    headers.insert(header::ALLOW, HeaderValue::from_static("POST, OPTIONS"));
    let Some(origin) = origin else { return response };
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
    );
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(ALLOWED_METHODS));
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allowed_headers(request));
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(PREFLIGHT_MAX_AGE));
    response
}

/// Marks a response to an allowed origin as readable by that origin.
pub fn expose(response: &mut Response<Body>, origin: &HeaderValue) {
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSED_RESPONSE_HEADERS));
}

/// The fixed list, plus each well-formed `mcp-param-*` name the preflight asks for.
fn allowed_headers(request: &HeaderMap) -> HeaderValue {
    let asked = request
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|name| is_param_header(name))
        .take(MAX_PARAM_HEADERS);
    let mut list = String::from(ALLOWED_REQUEST_HEADERS);
    for name in asked {
        list.push_str(", ");
        list.push_str(name);
    }
    HeaderValue::from_maybe_shared(Bytes::from(list)).expect("header names are visible ASCII")
}

/// `Mcp-Param-{Name}` with a non-empty name made of header token characters.
fn is_param_header(name: &str) -> bool {
    let prefix = super::headers::PARAM_PREFIX.len();
    name.len() > prefix
        && name.len() <= 128
        && name.is_char_boundary(prefix)
        && name[..prefix].eq_ignore_ascii_case(super::headers::PARAM_PREFIX)
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preflight_allows_the_standard_headers_and_the_params_asked_for() {
        let origin = HeaderValue::from_static("http://127.0.0.1:5173");
        let mut request = HeaderMap::new();
        request.insert(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_static(
                "content-type, mcp-param-region, Mcp-Param-Count, x-evil, mcp-param-, mcp-param-a b",
            ),
        );
        let response = preflight(Some(&origin), &request);
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        let headers = response.headers();
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "http://127.0.0.1:5173");
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_METHODS], "GET, POST, DELETE");
        assert_eq!(headers[header::ACCESS_CONTROL_MAX_AGE], PREFLIGHT_MAX_AGE);
        assert!(headers[header::VARY].to_str().unwrap().starts_with("Origin"));
        let allowed = headers[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap();
        for name in [
            "Content-Type",
            "Authorization",
            "MCP-Protocol-Version",
            "Mcp-Method",
            "Mcp-Name",
            "traceparent",
            "tracestate",
            "baggage",
            "Last-Event-ID",
            "x-vercel-protection-bypass",
            "mcp-param-region",
            "Mcp-Param-Count",
        ] {
            assert!(allowed.split(", ").any(|a| a == name), "{name} in {allowed}");
        }
        for refused in ["x-evil", "mcp-param-"] {
            assert!(!allowed.split(", ").any(|a| a == refused), "{refused} not in {allowed}");
        }
        assert!(!allowed.contains("a b"));
    }

    #[test]
    fn without_an_origin_options_only_names_the_methods() {
        let response = preflight(None, &HeaderMap::new());
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert_eq!(response.headers()[header::ALLOW], "POST, OPTIONS");
        assert!(!response.headers().contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    }

    #[test]
    fn param_names_are_capped() {
        let asked: Vec<String> = (0..100).map(|i| format!("mcp-param-p{i}")).collect();
        let mut request = HeaderMap::new();
        request.insert(header::ACCESS_CONTROL_REQUEST_HEADERS, HeaderValue::from_str(&asked.join(",")).unwrap());
        let response = preflight(Some(&HeaderValue::from_static("http://localhost:1")), &request);
        let allowed = response.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap();
        assert_eq!(allowed.matches("mcp-param-").count(), MAX_PARAM_HEADERS);
    }
}
