//! Which Vercel OIDC token the server may use for platform calls (Vercel Queues publishes, a queue
//! delivery's confirmation and acknowledgement, the Sandbox API) on behalf of a request.
//!
//! Vercel passes each invocation its project's OIDC token in `x-vercel-oidc-token`, and its
//! helpers read that header first. Vercel's documentation does not say that the platform always
//! replaces a copy the client sent, so the header is treated as client input: it is used only
//! when its (unverified) claims name this deployment's project, and environment when that is
//! known; otherwise the deployment's own `VERCEL_OIDC_TOKEN`, if any. A token for another project
//! is never used, so a client cannot point a publish or a sandbox at an account of its choosing,
//! nor make a queue of its own vouch for a forged delivery; a forged token with the right claims
//! fails at the platform, which verifies the signature.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;
use serde_json::Value;

/// The request header that carries the platform's token.
pub const OIDC_TOKEN_HEADER: http::HeaderName = http::HeaderName::from_static("x-vercel-oidc-token");

/// This deployment, as the platform names it in its tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlatformIdentity {
    /// `VERCEL_PROJECT_ID`: without it no request token is accepted.
    pub project_id: Option<String>,
    /// `VERCEL_TARGET_ENV`, else `VERCEL_ENV` (`production`, `preview`, …).
    pub environment: Option<String>,
}

impl PlatformIdentity {
    /// Reads `VERCEL_PROJECT_ID` and `VERCEL_TARGET_ENV` / `VERCEL_ENV` through `var`.
    pub fn from_lookup(var: &dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            project_id: var("VERCEL_PROJECT_ID"),
            environment: var("VERCEL_TARGET_ENV").or_else(|| var("VERCEL_ENV")),
        }
    }

    /// The request's token, if it was sent once and names this project (and environment).
    pub fn token_from(&self, headers: &HeaderMap) -> Option<String> {
        let project = self.project_id.as_deref()?;
        let mut values = headers.get_all(OIDC_TOKEN_HEADER).iter();
        let token = values.next()?.to_str().ok().filter(|t| !t.is_empty())?;
        if values.next().is_some() {
            return None;
        }
        let claims = unverified_claims(token)?;
        let names_us = claims.get("project_id").and_then(Value::as_str) == Some(project)
            && self
                .environment
                .as_deref()
                .is_none_or(|env| claims.get("environment").and_then(Value::as_str) == Some(env));
        names_us.then(|| token.to_owned())
    }
}

/// A JWT's payload, decoded but not verified: for routing decisions only, never for trust.
pub fn unverified_claims(token: &str) -> Option<Value> {
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else { return None };
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?).ok().filter(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn token(claims: Value) -> String {
        format!("eyJhbGciOiJSUzI1NiJ9.{}.sig", URL_SAFE_NO_PAD.encode(claims.to_string()))
    }

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(OIDC_TOKEN_HEADER, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn only_a_token_naming_this_project_and_environment_is_used() {
        let us = PlatformIdentity { project_id: Some("prj_1".into()), environment: Some("production".into()) };
        let ours = token(serde_json::json!({"project_id": "prj_1", "environment": "production"}));
        assert_eq!(us.token_from(&headers(&[&ours])), Some(ours.clone()));
        for foreign in [
            token(serde_json::json!({"project_id": "prj_attacker", "environment": "production"})),
            token(serde_json::json!({"project_id": "prj_1", "environment": "preview"})),
            token(serde_json::json!({"environment": "production"})),
            "opaque".to_owned(),
        ] {
            assert_eq!(us.token_from(&headers(&[&foreign])), None, "{foreign}");
        }
        assert_eq!(us.token_from(&headers(&[&ours, &ours])), None, "sent twice");
        assert_eq!(us.token_from(&HeaderMap::new()), None);
        let unknown = PlatformIdentity::default();
        assert_eq!(unknown.token_from(&headers(&[&ours])), None, "a process that does not know its project uses none");
        let any_env = PlatformIdentity { project_id: Some("prj_1".into()), environment: None };
        assert_eq!(any_env.token_from(&headers(&[&ours])), Some(ours));
    }
}
