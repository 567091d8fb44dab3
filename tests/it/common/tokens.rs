//! Signed test tokens and a stub JWKS endpoint on loopback.

#![allow(dead_code)]

use bytes::Bytes;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use vercel_mcp::Parts;
use vercel_mcp::state::ManualClock;

pub const NOW: u64 = 1_800_000_000;
pub const ISSUER: &str = "https://auth.example.com";
pub const RESOURCE: &str = "https://mcp.example.com/api/mcp";
pub const PRIVATE_KEY: &[u8] = include_bytes!("../../fixtures/rsa_private.pem");
pub const PUBLIC_KEY: &[u8] = include_bytes!("../../fixtures/rsa_public.pem");
pub const JWKS: &str = include_str!("../../fixtures/jwks.json");

/// Serves the test JWKS on a free port; returns its URL and a fetch counter.
pub async fn stub_jwks() -> (String, Arc<AtomicUsize>) {
    let fetches = Arc::new(AtomicUsize::new(0));
    let counter = fetches.clone();
    let addr = super::upstream::serve(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { (200, Bytes::from_static(JWKS.as_bytes())) }
    })
    .await;
    (format!("http://{addr}/jwks.json"), fetches)
}

/// A configuration with authentication against the stub JWKS, on a clock pinned at `NOW`.
pub fn auth_config(jwks_url: String, extra: &[(&str, &str)]) -> Parts {
    let mut vars: HashMap<String, String> = HashMap::from([
        ("MCP_RESOURCE_URL".to_owned(), RESOURCE.to_owned()),
        ("MCP_AUTH_ISSUER".to_owned(), ISSUER.to_owned()),
        ("MCP_JWKS_URL".to_owned(), jwks_url),
        ("MCP_STATE_SECRET".to_owned(), "auth=0123456789abcdef0123456789abcdef".to_owned()),
    ]);
    for (k, v) in extra {
        vars.insert(k.to_string(), v.to_string());
    }
    let clock = Arc::new(ManualClock::new(NOW * 1000));
    Parts::from_lookup(|name| vars.get(name).filter(|v| !v.is_empty()).cloned(), clock).unwrap()
}

/// Claims of a valid token, with `overrides` applied (`null` removes a claim).
pub fn claims(overrides: Value) -> Value {
    let mut claims = json!({
        "iss": ISSUER, "aud": RESOURCE, "sub": "alice", "client_id": "client-read",
        "iat": NOW - 10, "exp": NOW + 600, "scope": "mcp:read",
    });
    for (k, v) in overrides.as_object().unwrap() {
        if v.is_null() {
            claims.as_object_mut().unwrap().remove(k);
        } else {
            claims[k] = v.clone();
        }
    }
    claims
}

/// An RS256 token signed with the fixture key under `kid`.
pub fn rs256(claims: &Value, kid: &str) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_pem(PRIVATE_KEY).unwrap()).unwrap()
}

/// A valid token with `overrides`.
pub fn token(overrides: Value) -> String {
    rs256(&claims(overrides), "test-rsa-1")
}

/// `Bearer <token>` for `sub` holding `scopes`.
pub fn bearer(sub: &str, scopes: &str) -> String {
    format!("Bearer {}", token(json!({"sub": sub, "scope": scopes})))
}

pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A Vercel OIDC-shaped token naming `project` (unsigned: the platform's API would verify it,
/// and the server only reads its claims to decide whether it may forward it).
pub fn platform_token(project: &str) -> String {
    let payload = json!({"owner_id": "team_1", "project_id": project, "sub": "owner:x:project:y"});
    format!("eyJhbGciOiJSUzI1NiJ9.{}.sig", b64(payload.to_string().as_bytes()))
}
