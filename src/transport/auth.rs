//! HTTP renderings of the authentication decisions `security` makes: the 401/403 challenge,
//! and the RFC 9728 protected-resource metadata document.

use http::{HeaderValue, Method, Response, StatusCode, header};
use serde_json::json;

use crate::body::{Body, ResponseOutcome};
use crate::security::{Authenticator, Refusal};

/// The refusal as a response: its status, the `WWW-Authenticate` challenge (or, when the keys
/// could not be fetched, `Retry-After`) and a JSON body (`error`, `error_description`).
pub fn refusal_response(auth: &Authenticator, refusal: &Refusal) -> Response<Body> {
    let challenge = auth.challenge(refusal);
    // A challenge without an error code answers a request that sent no credential (RFC 6750 §3.1).
    let (body, outcome) = match challenge.error {
        None => (json!({ "error_description": challenge.description }), ResponseOutcome::AuthRequired),
        // Not a verdict on the credential: the server could not tell (a 5xx, logged as an error).
        Some(error) if matches!(refusal, Refusal::KeysUnavailable { .. }) => (
            json!({ "error": error, "error_description": challenge.description }),
            ResponseOutcome::ProtocolError(None),
        ),
        Some(error) => {
            let expired = *refusal == Refusal::InvalidToken(crate::security::auth::TOKEN_EXPIRED);
            let outcome = if expired { ResponseOutcome::TokenExpired } else { ResponseOutcome::AuthFailure };
            (json!({ "error": error, "error_description": challenge.description }), outcome)
        }
    };
    let body = Body::full(serde_json::to_vec(&body).expect("json")).with_outcome(outcome);
    let mut response = Response::new(body);
    *response.status_mut() = challenge.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Refusal::KeysUnavailable { retry_after_secs } = refusal {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    } else if let Ok(value) = HeaderValue::from_str(&challenge.www_authenticate) {
        headers.insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The largest request body the metadata route reads (413 past it): a GET carries none.
pub const METADATA_MAX_BODY_BYTES: usize = 1024;

/// Serves `/.well-known/oauth-protected-resource` (and its path-suffixed forms): GET returns
/// the document, OPTIONS answers the CORS preflight; both allow any origin, as the document is
/// public.
pub fn metadata_response(auth: &Authenticator, method: &Method) -> Response<Body> {
    let (status, body) = match *method {
        Method::GET | Method::HEAD => (StatusCode::OK, Body::full(serde_json::to_vec(&auth.metadata()).expect("json"))),
        Method::OPTIONS => (StatusCode::NO_CONTENT, Body::empty()),
        _ => (StatusCode::METHOD_NOT_ALLOWED, Body::empty()),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, OPTIONS"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("*"));
    if status == StatusCode::OK {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(header::ALLOW, HeaderValue::from_static("GET, OPTIONS"));
    }
    response
}
