//! The resource server over HTTP: a token matrix against a stub JWKS on loopback. Each bad
//! token gets the right status, challenge and body; no handler runs; nothing echoes the token.

use crate::common;

use common::TestServer;
use common::tokens::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use vercel_mcp::Parts;
use vercel_mcp::local::Routes;
use vercel_mcp::observe::MemorySink;

struct Env {
    server: TestServer,
    fetches: Arc<AtomicUsize>,
    logs: Arc<MemorySink>,
}

async fn env(mode: &str, route_scopes: &str) -> Env {
    let (jwks_url, fetches) = stub_jwks().await;
    let mut config = auth_config(jwks_url, &[("MCP_AUTH_MODE", mode), ("MCP_AUTH_SCOPES", route_scopes)]);
    let logs = Arc::new(MemorySink::default());
    config.log_sink = logs.clone();
    Env {
        server: TestServer::start_routes(Routes::with_mcp(common::everything_app(&config)).with_jobs(&config)).await,
        fetches,
        logs,
    }
}

impl Env {
    /// The `whoami` audit entries so far.
    fn audit(&self) -> Vec<Value> {
        self.logs.lines().into_iter().filter(|line| line["event"] == "tool_audit").collect()
    }

    async fn whoami(&self, authorization: Option<&str>) -> common::Reply {
        let mut call = self.server.modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}));
        if let Some(value) = authorization {
            call = call.header("Authorization", value);
        }
        call.send().await
    }

    /// `whoami` with `authorization` and extra headers.
    async fn whoami_with(&self, authorization: &str, headers: &[(&str, &str)]) -> common::Reply {
        let mut call = self
            .server
            .modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}))
            .header("Authorization", authorization);
        for (name, value) in headers {
            call = call.header(name, value);
        }
        call.send().await
    }

    /// The `tools/list` result for a caller with `token` (anonymous without one).
    async fn list_tools(&self, token: Option<&str>) -> Value {
        let mut call = self.server.modern(json!(1), "tools/list", json!({}));
        if let Some(token) = token {
            call = call.header("Authorization", &format!("Bearer {token}"));
        }
        call.send().await.json()["result"].clone()
    }
}

fn tool_names(list: &Value) -> Vec<&str> {
    list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
}

/// Parses `Bearer k="v", k="v"`.
fn challenge(reply: &common::Reply) -> HashMap<String, String> {
    let header = reply.header("www-authenticate").expect("a challenge");
    let params = header.strip_prefix("Bearer ").expect("a Bearer challenge");
    params
        .split("\", ")
        .filter_map(|part| part.split_once("=\""))
        .map(|(k, v)| (k.to_owned(), v.trim_end_matches('"').to_owned()))
        .collect()
}

/// A 401 for a request that carried no credentials, or none of the Bearer scheme: no error
/// code or description in the challenge (RFC 6750 §3.1), only where to find the metadata and,
/// when there are any, the scopes to ask for.
fn assert_token_required(reply: &common::Reply, scope: Option<&str>) {
    assert_eq!(reply.status, 401, "{}", reply.text());
    let params = challenge(reply);
    assert!(!params.contains_key("error") && !params.contains_key("error_description"), "{params:?}");
    assert_eq!(params["resource_metadata"], "https://mcp.example.com/.well-known/oauth-protected-resource");
    assert_eq!(params.get("scope").map(String::as_str), scope);
    assert!(reply.json().get("error").is_none(), "{}", reply.text());
}

fn assert_refused(reply: &common::Reply, status: u16, error: &str, secret: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    let params = challenge(reply);
    assert_eq!(params["error"], error);
    assert_eq!(params["resource_metadata"], "https://mcp.example.com/.well-known/oauth-protected-resource");
    assert_eq!(reply.json()["error"], error);
    if !secret.is_empty() {
        assert!(!reply.text().contains(secret), "the body must not echo the credential");
        assert!(!reply.header("www-authenticate").unwrap().contains(secret), "nor the challenge");
    }
}

#[tokio::test]
async fn the_token_matrix() {
    let env = env("required", "mcp:read").await;
    let valid = token(json!({}));
    let ok = env.whoami(Some(&format!("Bearer {valid}"))).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(ok.header("www-authenticate").is_none());
    let who: Value = serde_json::from_str(ok.json()["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(who, json!({"clientId": "client-read", "scopes": ["mcp:read"]}));
    assert!(!ok.text().contains(&valid));
    let audit = env.audit();
    assert_eq!(audit.len(), 1, "one audit entry per successful call: {audit:?}");
    assert_eq!((audit[0]["clientId"].clone(), audit[0]["tool"].clone()), (json!("client-read"), json!("whoami")));
    assert!(!env.logs.raw().iter().any(|line| line.contains(&valid)), "the token is never logged");
    assert_eq!(env.whoami(Some(&format!("bearer {valid}"))).await.status, 200, "the scheme is case-insensitive");

    let hs256_with_public_key = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("test-rsa-1".into());
        jsonwebtoken::encode(&header, &claims(json!({})), &EncodingKey::from_secret(PUBLIC_KEY)).unwrap()
    };
    let unsigned = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT","kid":"test-rsa-1"}"#),
        b64(claims(json!({})).to_string().as_bytes())
    );
    let tampered = {
        let mut parts: Vec<String> = valid.split('.').map(str::to_owned).collect();
        parts[1] = b64(claims(json!({"scope": "mcp:read mcp:write"})).to_string().as_bytes());
        parts.join(".")
    };
    let bad_tokens = [
        ("expired at its exp second", token(json!({"exp": NOW, "iat": NOW - 100}))),
        ("expired", token(json!({"exp": NOW - 1, "iat": NOW - 100}))),
        ("not yet valid past the clock skew", token(json!({"nbf": NOW + 61}))),
        ("wrong issuer", token(json!({"iss": "https://evil.example"}))),
        ("issuer with a trailing slash", token(json!({"iss": "https://auth.example.com/"}))),
        ("wrong audience", token(json!({"aud": "https://other-server.example/api/mcp"}))),
        ("two audiences", token(json!({"aud": [RESOURCE, "https://other.example"]}))),
        ("no audience", token(json!({"aud": null}))),
        ("no expiry", token(json!({"exp": null}))),
        ("lifetime over an hour", token(json!({"iat": NOW - 10, "exp": NOW + 3600}))),
        ("no subject or client", token(json!({"sub": null, "client_id": null}))),
        ("alg none", unsigned),
        ("HS256 signed with the RSA public key", hs256_with_public_key),
        ("unknown kid", rs256(&claims(json!({})), "someone-elses-key")),
        ("tampered signature", tampered),
        ("garbage", "not.a.jwt".to_owned()),
    ];
    for (case, bad) in &bad_tokens {
        let reply = env.whoami(Some(&format!("Bearer {bad}"))).await;
        assert_refused(&reply, 401, "invalid_token", bad);
        assert_eq!(challenge(&reply)["scope"], "mcp:read", "{case}");
        // Only a token that was good until it expired is told so (its holder refreshes it);
        // every other refusal says nothing of why.
        let expected = if case.starts_with("expired") {
            vercel_mcp::security::auth::TOKEN_EXPIRED
        } else {
            "the access token is invalid or expired"
        };
        assert_eq!(reply.json()["error_description"], expected, "{case}");
    }
    // Expired and wrong in some other way (its audience, its signature, its start): not "expired".
    let tampered_expired = {
        let mut parts: Vec<String> =
            token(json!({"exp": NOW - 1, "iat": NOW - 100})).split('.').map(str::to_owned).collect();
        parts[1] = b64(claims(json!({"exp": NOW - 1, "iat": NOW - 100, "scope": "mcp:write"})).to_string().as_bytes());
        parts.join(".")
    };
    for (case, bad) in [
        (
            "expired, for another audience",
            token(json!({"exp": NOW - 1, "iat": NOW - 100, "aud": "https://other.example"})),
        ),
        ("expired, tampered", tampered_expired),
        // Its `nbf` is past its `exp` by more than the clock skew allowed: it was never valid.
        ("expired before it started", token(json!({"exp": NOW - 1, "iat": NOW - 100, "nbf": NOW + 100}))),
    ] {
        let reply = env.whoami(Some(&format!("Bearer {bad}"))).await;
        assert_refused(&reply, 401, "invalid_token", &bad);
        assert_eq!(reply.json()["error_description"], "the access token is invalid or expired", "{case}");
    }
    for header in ["Bearer", "Bearer    ", "Bearer\tabc", "bearer"] {
        assert_refused(&env.whoami(Some(header)).await, 401, "invalid_token", "");
    }
    // No credentials, or another scheme's: no error information, only what to ask for.
    for header in ["Basic YWxpY2U6c2VjcmV0", "Token abc", "Bearerish abc"] {
        assert_token_required(&env.whoami(Some(header)).await, Some("mcp:read"));
    }
    let missing = env.whoami(None).await;
    assert_token_required(&missing, Some("mcp:read"));
    assert_eq!(env.audit().len(), 2, "only the two accepted calls above were audited");
    let doubled = env
        .server
        .modern(json!(1), "tools/list", json!({}))
        .header("Authorization", &format!("Bearer {valid}"))
        .header("Authorization", &format!("Bearer {valid}"))
        .send()
        .await;
    // Repeated credentials are a malformed request (RFC 6750 §3.1), not a bad token: a 401
    // invalid_token would send a client off for a new token that would meet the same refusal.
    assert_refused(&doubled, 400, "invalid_request", &valid);

    // The unknown kid triggered one refetch; further unknown kids within the window do not.
    let after_unknown = env.fetches.load(Ordering::SeqCst);
    env.whoami(Some(&format!("Bearer {}", rs256(&claims(json!({})), "another-unknown")))).await;
    assert_eq!(env.fetches.load(Ordering::SeqCst), after_unknown, "refetching on unknown kids is rate-limited");
}

#[tokio::test]
async fn scopes_gate_the_route_the_listing_and_each_call() {
    let env = env("required", "mcp:read").await;
    let none = token(json!({"scope": ""}));
    let reply = env.whoami(Some(&format!("Bearer {none}"))).await;
    assert_refused(&reply, 403, "insufficient_scope", &none);
    assert!(env.audit().is_empty(), "a denial leaves no audit entry");
    assert_eq!(challenge(&reply)["scope"], "mcp:read");

    let read = token(json!({}));
    let list = env.list_tools(Some(&read)).await;
    assert_eq!(
        tool_names(&list),
        [
            "echo",
            "summarize",
            "list_items",
            "get_item",
            "weather_get",
            "directory_lookup",
            "whoami",
            "get_job_status",
            "get_job_result",
            "list_categories",
            "get_products_by_category"
        ],
        "a read-only caller sees no write tools"
    );
    assert_eq!(list["cacheScope"], "private");
    let submit = env
        .server
        .modern(json!(1), "tools/call", json!({"name": "submit_job", "arguments": {"steps": 1}}))
        .header("Authorization", &format!("Bearer {read}"))
        .send()
        .await;
    assert_refused(&submit, 403, "insufficient_scope", &read);
    assert_eq!(challenge(&submit)["scope"], "mcp:read mcp:write", "the challenge names what the tool needs");

    let full = token(json!({"scope": "mcp:read mcp:write"}));
    assert_eq!(
        tool_names(&env.list_tools(Some(&full)).await),
        [
            "echo",
            "book_meeting",
            "summarize",
            "list_items",
            "get_item",
            "create_item",
            "weather_get",
            "directory_lookup",
            "whoami",
            "submit_job",
            "get_job_status",
            "get_job_result",
            "cancel_job",
            "list_categories",
            "get_products_by_category",
            "run_in_sandbox"
        ],
        "read and write scopes see every tool"
    );
}

/// Identity claims are taken byte for byte and never cleaned: a subject that differs from another
/// only by a look-alike letter (Cyrillic `а` for Latin `a`) or by case is another principal, whose
/// job handles the first cannot use; non-ASCII subjects work. A subject with a control character
/// is refused (401), and a `client_id` with one is left out (`azp` serves, or none).
#[tokio::test]
async fn identity_claims_are_exact_and_control_characters_are_refused() {
    let env = env("required", "").await;
    let bearer = |claims: Value| format!("Bearer {}", token(claims));
    let as_sub = |sub: &str| bearer(json!({"sub": sub, "scope": "mcp:read mcp:write"}));
    let call = |auth: String, tool: &str, arguments: Value| {
        env.server
            .modern(json!(1), "tools/call", json!({"name": tool, "arguments": arguments}))
            .header("Authorization", &auth)
    };
    let submitted = call(as_sub("ålice"), "submit_job", json!({"steps": 1})).send().await.json();
    let handle =
        common::payload(&submitted["result"])["jobId"].as_str().expect("a non-ASCII subject submits").to_owned();
    let own = call(as_sub("ålice"), "get_job_status", json!({"jobId": handle})).send().await.json();
    assert_eq!(common::payload(&own["result"])["state"], "pending", "{own}");
    for other in ["alice", "\u{430}lice", "Ålice", "ålice "] {
        let foreign = call(as_sub(other), "get_job_status", json!({"jobId": handle})).send().await.json();
        assert_eq!(common::error_text(&foreign["result"]), "unknown job handle", "{other:?}");
    }
    for sub in ["alice\nadmin", "alice\u{0}", "\u{1b}[31malice", "alice\u{85}"] {
        let refused = env.whoami(Some(&as_sub(sub))).await;
        assert_eq!(refused.status, 401, "{sub:?}: {}", refused.text());
    }
    let who = |reply: common::Reply| -> Value {
        serde_json::from_str(reply.json()["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    };
    let controlled = json!({"client_id": "app\u{1b}[31m", "azp": null});
    assert_eq!(who(env.whoami(Some(&bearer(controlled))).await)["clientId"], Value::Null);
    let fallback = json!({"client_id": "app\nother", "azp": "app-azp"});
    assert_eq!(who(env.whoami(Some(&bearer(fallback))).await)["clientId"], "app-azp");
}

#[tokio::test]
async fn job_handles_belong_to_the_verified_subject() {
    let env = env("required", "").await;
    let bearer = |sub: &str| format!("Bearer {}", token(json!({"sub": sub, "scope": "mcp:read mcp:write"})));
    let call = |auth: String, tool: &str, arguments: Value| {
        env.server
            .modern(json!(1), "tools/call", json!({"name": tool, "arguments": arguments}))
            .header("Authorization", &auth)
    };
    let submitted = call(bearer("alice"), "submit_job", json!({"steps": 2})).send().await.json();
    let handle = common::payload(&submitted["result"])["jobId"].as_str().unwrap().to_owned();
    let before = call(bearer("alice"), "get_job_status", json!({"jobId": handle})).send().await.json();
    for tool in ["get_job_status", "get_job_result", "cancel_job"] {
        let foreign =
            call(bearer("bob"), tool, json!({"jobId": handle, "principal": "sub:alice", "ownerId": "sub:alice"}))
                .send()
                .await
                .json();
        assert_eq!(common::error_text(&foreign["result"]), "unknown job handle", "{tool}");
        assert!(!foreign.to_string().contains("alice"));
    }
    let own = call(bearer("alice"), "get_job_status", json!({"jobId": handle})).send().await.json();
    assert_eq!(common::payload(&own["result"])["state"], "pending");
    assert_eq!(
        common::payload(&own["result"]),
        common::payload(&before["result"]),
        "the foreign attempts changed nothing (state, steps, cancellation)"
    );
    let anonymous = env
        .server
        .modern(json!(1), "tools/call", json!({"name": "get_job_status", "arguments": {"jobId": handle}}))
        .send()
        .await;
    assert_eq!(anonymous.status, 401, "an anonymous caller cannot reach the job at all");
}

#[tokio::test]
async fn origin_is_checked_before_authentication() {
    let env = env("required", "mcp:read").await;
    let reply = env
        .server
        .modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}))
        .header("Authorization", &format!("Bearer {}", token(json!({}))))
        .header("Origin", "https://evil.example")
        .send()
        .await;
    assert_eq!(reply.status, 403);
    assert!(reply.header("www-authenticate").is_none());
    assert!(env.audit().is_empty(), "a refused origin leaves no audit entry");
}

#[tokio::test]
async fn optional_mode_admits_anonymous_callers_but_not_bad_tokens() {
    let env = env("optional", "").await;
    assert_eq!(tool_names(&env.list_tools(None).await), ["echo"], "anonymous callers hold no scopes");
    let bad = env.server.modern(json!(1), "tools/list", json!({})).header("Authorization", "Bearer nope").send().await;
    assert_eq!(bad.status, 401, "an invalid token is refused, never downgraded to anonymous");
    // A scoped tool called with no token: what is missing is a token, so 401 and a challenge
    // naming the tool's scopes (which is what starts a client's authorization flow), not 403.
    let call = json!({"name": "submit_job", "arguments": {"steps": 1}});
    let anonymous = env.server.modern(json!(1), "tools/call", call).send().await;
    assert_token_required(&anonymous, Some("mcp:read mcp:write"));
}

/// In `optional` mode a route scope still binds every request: a caller with no token holds no
/// scope, so it is asked for a token (401 naming the scope), as one whose token lacks the scope
/// is refused (403). Before, sending no token passed the route gate a weak token could not.
#[tokio::test]
async fn optional_mode_still_asks_every_caller_for_the_route_scope() {
    let env = env("optional", "mcp:read").await;
    let list = |authorization: Option<String>| {
        let mut call = env.server.modern(json!(1), "tools/list", json!({}));
        if let Some(authorization) = authorization {
            call = call.header("Authorization", &authorization);
        }
        call.send()
    };
    assert_token_required(&list(None).await, Some("mcp:read"));
    assert_token_required(&list(Some("Basic YWxpY2U6c2VjcmV0".into())).await, Some("mcp:read"));
    let unscoped = token(json!({"scope": "other"}));
    assert_refused(&list(Some(format!("Bearer {unscoped}"))).await, 403, "insufficient_scope", &unscoped);
    let scoped = token(json!({}));
    assert_eq!(list(Some(format!("Bearer {scoped}"))).await.status, 200);
}

#[tokio::test]
async fn protected_resource_metadata_is_pinned_and_public() {
    let env = env("required", "mcp:read").await;
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/api/mcp"] {
        let reply = env
            .server
            .request("GET", path)
            .header("X-Forwarded-Host", "evil.example")
            .header("X-Forwarded-Proto", "https")
            .header("Forwarded", "host=\"evil.example\";proto=https")
            .send()
            .await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
        let document = reply.json();
        assert_eq!(document["resource"], RESOURCE);
        assert_eq!(document["authorization_servers"], json!([ISSUER]));
        assert!(!reply.text().contains("evil.example"));
        let preflight = env.server.request("OPTIONS", path).header("Origin", "https://inspector.example").send().await;
        assert_eq!(preflight.status, 204);
        assert_eq!(preflight.header("access-control-allow-origin"), Some("*"));
    }
    let unauthenticated = env.server.post("{}").header("X-Forwarded-Host", "evil.example").send().await;
    assert_eq!(unauthenticated.status, 401);
    let url = challenge(&unauthenticated)["resource_metadata"].clone();
    assert!(
        url.starts_with("https://mcp.example.com/")
            && !unauthenticated.header("www-authenticate").unwrap().contains("evil")
    );
    // Every forged host header at once, with a token minted for another resource: still the
    // pinned challenge.
    let foreign = token(json!({"aud": "https://evil.example/api/mcp"}));
    let forged = env
        .whoami_with(
            &format!("Bearer {foreign}"),
            &[
                ("X-Forwarded-Host", "evil.example"),
                ("X-Forwarded-Proto", "http"),
                ("Forwarded", "host=\"evil.example\";proto=http"),
                ("Host", "evil.example"),
            ],
        )
        .await;
    assert_refused(&forged, 401, "invalid_token", &foreign);
    assert!(!forged.header("www-authenticate").unwrap().contains("evil"));
    // The challenge's metadata URL resolves, on this server, to the pinned document.
    let path = url.strip_prefix("https://mcp.example.com").unwrap();
    let document = env.server.request("GET", path).send().await;
    assert_eq!(document.status, 200, "{path}");
    assert_eq!(document.json()["resource"], RESOURCE);
}

#[test]
fn configuration_refuses_unsafe_setups() {
    let load = |vars: &[(&str, &str)]| {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Parts::from_lookup(|k| map.get(k).cloned(), Arc::new(vercel_mcp::state::SystemClock))
    };
    let secret = ("MCP_STATE_SECRET", "x=0123456789abcdef0123456789abcdef");
    let problems =
        load(&[("VERCEL", "1"), secret, ("MCP_AUTH_HS256_SECRET", "0123456789abcdef0123456789abcdef")]).unwrap_err().0;
    assert!(problems.iter().any(|p| p.contains("MCP_AUTH_HS256_SECRET")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("MCP_RESOURCE_URL")), "{problems:?}");
    let problems = load(&[("VERCEL", "1"), secret, ("MCP_RESOURCE_URL", RESOURCE)]).unwrap_err().0;
    assert!(
        problems.iter().any(|p| p.contains("no keys")) && problems.iter().any(|p| p.contains("MCP_AUTH_ISSUER")),
        "{problems:?}"
    );
    let problems = load(&[secret, ("MCP_AUTH_MODE", "sometimes")]).unwrap_err().0;
    assert!(problems.iter().any(|p| p.contains("MCP_AUTH_MODE")));
    let problems = load(&[secret, ("MCP_RESOURCE_URL", "not a url"), ("MCP_AUTH_MODE", "off")]).unwrap_err().0;
    assert!(problems.iter().any(|p| p.contains("MCP_RESOURCE_URL")));
    let problems = load(&[secret, ("MCP_AUTH_ALGORITHMS", "HS256"), ("MCP_JWKS", JWKS), ("MCP_AUTH_ISSUER", ISSUER)])
        .unwrap_err()
        .0;
    assert!(problems.iter().any(|p| p.contains("MCP_AUTH_ALGORITHMS")));
    assert!(load(&[secret, ("MCP_JWKS", JWKS), ("MCP_AUTH_ISSUER", ISSUER)]).is_ok(), "local with inline JWKS");
    for url in ["http://localhost.evil.example/jwks.json", "http://auth.example.com/jwks.json", "not a url"] {
        let problems = load(&[secret, ("MCP_JWKS_URL", url), ("MCP_AUTH_ISSUER", ISSUER)]).unwrap_err().0;
        assert!(problems.iter().any(|p| p.contains("https")), "{url}: {problems:?}");
    }
    assert!(
        load(&[secret, ("MCP_JWKS_URL", "http://127.0.0.1:9/jwks.json"), ("MCP_AUTH_ISSUER", ISSUER)]).is_ok(),
        "loopback test doubles"
    );
    let problems =
        load(&[secret, ("MCP_JWKS", JWKS), ("MCP_AUTH_ISSUER", ISSUER), ("MCP_AUTH_MAX_LIFETIME_SECONDS", "999999")])
            .unwrap_err()
            .0;
    assert!(problems.iter().any(|p| p.contains("MCP_AUTH_MAX_LIFETIME_SECONDS")));
    assert!(
        load(&[("VERCEL", "1"), ("VERCEL_ENV", "preview"), secret, ("MCP_AUTH_MODE", "off")]).is_ok(),
        "auth explicitly off"
    );
}

#[tokio::test]
async fn refused_requests_never_reach_a_handler() {
    use vercel_mcp::protocol::types::CallToolResult;
    use vercel_mcp::server::{McpServer, NoArguments, ToolDef};
    let (jwks_url, _) = stub_jwks().await;
    let config = auth_config(jwks_url, &[]);
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let mut server = McpServer::new("count", "1");
    server.tool(ToolDef::new("count").description("Counts").scopes(&["mcp:write"]), move |_, _: NoArguments| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { CallToolResult::text("counted") }
    });
    let server = TestServer::start(Arc::new(vercel_mcp::App::new(server, config.endpoint()))).await;
    let call = |auth: Option<String>| {
        let mut call = server.modern(json!(1), "tools/call", json!({"name": "count", "arguments": {}}));
        if let Some(auth) = auth {
            call = call.header("Authorization", &auth);
        }
        call.send()
    };
    assert_token_required(&call(None).await, None);
    assert_refused(&call(Some("Bearer junk".to_owned())).await, 401, "invalid_token", "junk");
    let expired = token(json!({"exp": NOW}));
    assert_refused(&call(Some(format!("Bearer {expired}"))).await, 401, "invalid_token", &expired);
    let read_only = token(json!({"scope": "mcp:read"}));
    assert_refused(&call(Some(format!("Bearer {read_only}"))).await, 403, "insufficient_scope", &read_only);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no refused request ran the handler");
    assert_eq!(call(Some(format!("Bearer {}", token(json!({"scope": "mcp:write"}))))).await.status, 200);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let legacy = server
        .post(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#)
        .send()
        .await;
    assert_eq!(legacy.status, 401, "the legacy path is authenticated too");
}

#[tokio::test]
async fn a_remembered_verification_still_expires_with_its_token() {
    use std::collections::HashMap;
    let (jwks_url, fetches) = stub_jwks().await;
    let vars: HashMap<&str, String> = HashMap::from([
        ("MCP_RESOURCE_URL", RESOURCE.to_owned()),
        ("MCP_AUTH_ISSUER", ISSUER.to_owned()),
        ("MCP_JWKS_URL", jwks_url),
        ("MCP_STATE_SECRET", "auth=0123456789abcdef0123456789abcdef".to_owned()),
    ]);
    let clock = Arc::new(vercel_mcp::state::ManualClock::new(NOW * 1000));
    let config = Parts::from_lookup(|k| vars.get(k).cloned(), clock.clone()).unwrap();
    let server = TestServer::start(common::everything_app(&config)).await;
    let auth = format!("Bearer {}", token(json!({"exp": NOW + 60})));
    let list = || server.modern(json!(1), "tools/list", json!({})).header("Authorization", &auth).send();
    assert_eq!(list().await.status, 200);
    assert_eq!(list().await.status, 200, "the second use is accepted too");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    // The cache is keyed by the whole token: the same claims under an altered signature are
    // checked again, and refused, never served from it.
    let valid = token(json!({"exp": NOW + 60}));
    let mut tampered = valid.clone().into_bytes();
    let at = tampered.len() - 20;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = format!("Bearer {}", String::from_utf8(tampered).unwrap());
    let forged = server.modern(json!(1), "tools/list", json!({})).header("Authorization", &tampered).send().await;
    assert_eq!(forged.status, 401, "an altered signature never hits the cache");
    // The remembered token's signature under another payload: it ends as the remembered token
    // does, so it reaches the same entry, and is still verified (and refused), never served.
    let (_, signature) = valid.rsplit_once('.').unwrap();
    let (header, _) = valid.split_once('.').unwrap();
    let other_claims = token(json!({"exp": NOW + 60, "sub": "someone-else"}));
    let other_payload = other_claims.split('.').nth(1).unwrap();
    let spliced = format!("Bearer {header}.{other_payload}.{signature}");
    let forged = server.modern(json!(1), "tools/list", json!({})).header("Authorization", &spliced).send().await;
    assert_eq!(forged.status, 401, "a payload under a remembered signature never hits the cache");
    // A remembered token is read from the header as on its first use: any case of `Bearer`,
    // spaces and tabs around the token; another scheme is refused however well the token is known.
    let with = |value: String| server.modern(json!(1), "tools/list", json!({})).header("Authorization", &value).send();
    assert_eq!(with(format!("bEaReR  \t{valid} \t")).await.status, 200);
    for refused in [format!("Basic {valid}"), format!("Bearer{valid}"), format!("Token {valid}"), valid.clone()] {
        assert_eq!(with(refused).await.status, 401);
    }
    assert_eq!(list().await.status, 200, "and the genuine token still does");
    clock.advance_ms(60_000);
    assert_eq!(list().await.status, 401, "a cached token expires at its exp second");
}

#[tokio::test]
async fn a_read_token_discovers_the_server_and_whoami_takes_no_arguments() {
    let env = env("required", "mcp:read").await;
    let read = token(json!({}));
    let discover = env
        .server
        .modern(json!(1), "server/discover", json!({}))
        .header("Authorization", &format!("Bearer {read}"))
        .send()
        .await;
    assert_eq!(discover.status, 200, "{}", discover.text());
    assert!(discover.json()["result"].is_object(), "{}", discover.text());
    assert!(!discover.text().contains(&read));
    let list = env.list_tools(Some(&read)).await;
    let whoami = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == "whoami").unwrap().clone();
    let properties = whoami["inputSchema"]["properties"].as_object().map_or(0, |p| p.len());
    assert_eq!(properties, 0, "identity is never caller-supplied: {whoami}");
    assert!(env.audit().is_empty(), "listing and discovery are not audited calls");
}

/// A browser client on an allowed origin can read the 401 challenge: the refusal carries the
/// CORS headers and exposes `WWW-Authenticate`, or the page could never start the OAuth flow.
#[tokio::test]
async fn a_browser_can_read_the_challenge() {
    let env = env("required", "").await;
    let reply =
        env.server.modern(json!(1), "tools/list", json!({})).header("Origin", "http://localhost:6274").send().await;
    assert_eq!(reply.status, 401);
    assert!(reply.header("www-authenticate").is_some_and(|c| c.starts_with("Bearer ")));
    assert_eq!(reply.header("access-control-allow-origin"), Some("http://localhost:6274"));
    assert!(reply.header("access-control-expose-headers").unwrap().to_ascii_lowercase().contains("www-authenticate"));
}

/// A token whose subject is missing, empty or holds a control character is refused, rather than
/// becoming `client:<client_id>` and so sharing one identity among every user of that client.
/// An integer subject is the user's id as text. A deployment that takes client-credentials
/// tokens says so (`MCP_AUTH_CLIENT_CREDENTIALS=on`), and only then is the client the caller.
#[tokio::test]
async fn a_token_without_a_usable_subject_is_refused_unless_client_credentials_are_configured() {
    let env = env("required", "").await;
    for (case, sub) in
        [("missing", Value::Null), ("empty", json!("")), ("control", json!("ali\u{7}ce")), ("float", json!(1.5))]
    {
        let bad = token(json!({"sub": sub, "client_id": "shared-client"}));
        let reply = env.whoami(Some(&format!("Bearer {bad}"))).await;
        assert_refused(&reply, 401, "invalid_token", &bad);
        assert!(env.audit().is_empty(), "{case}: the tool never ran");
    }
    // Two users of one client, with integer subjects: each is their own principal.
    let user = |sub: u64| {
        format!("Bearer {}", token(json!({"sub": sub, "client_id": "shared-client", "scope": "mcp:read mcp:write"})))
    };
    let submit = env
        .server
        .modern(json!(1), "tools/call", json!({"name": "submit_job", "arguments": {"steps": 1}}))
        .header("Authorization", &user(1))
        .send()
        .await;
    assert_eq!(submit.status, 200, "{}", submit.text());
    let handle = common::payload(&submit.json()["result"])["jobId"].as_str().unwrap().to_owned();
    let status = |bearer: String| {
        env.server
            .modern(json!(2), "tools/call", json!({"name": "get_job_status", "arguments": {"jobId": handle}}))
            .header("Authorization", &bearer)
            .send()
    };
    let own = status(user(1)).await.json();
    assert_eq!(common::payload(&own["result"])["state"], "pending", "the owner reads it: {own}");
    let foreign = status(user(2)).await.json();
    assert_eq!(foreign["result"]["isError"], true, "another user of the same client does not: {foreign}");

    let (jwks_url, _) = stub_jwks().await;
    let config = auth_config(jwks_url, &[("MCP_AUTH_MODE", "required"), ("MCP_AUTH_CLIENT_CREDENTIALS", "on")]);
    let server = TestServer::start_routes(Routes::with_mcp(common::everything_app(&config))).await;
    let client_token = token(json!({"sub": null, "client_id": "batch-client"}));
    let reply = server
        .modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}))
        .header("Authorization", &format!("Bearer {client_token}"))
        .send()
        .await;
    assert_eq!(reply.status, 200, "a client-credentials deployment admits the client: {}", reply.text());
    let control = token(json!({"sub": "a\u{1b}b", "client_id": "batch-client"}));
    let refused = server
        .modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}))
        .header("Authorization", &format!("Bearer {control}"))
        .send()
        .await;
    assert_eq!(refused.status, 401, "a malformed subject is refused there too");
}

/// Only access-token types pass: no `typ`, `JWT`, or RFC 9068's `at+jwt` (with or without the
/// `application/` prefix). A token of another type from the same issuer and key is refused.
#[tokio::test]
async fn only_access_token_types_are_accepted() {
    let env = env("required", "").await;
    let typed = |typ: Option<&str>| {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("test-rsa-1".into());
        header.typ = typ.map(str::to_owned);
        let key = EncodingKey::from_rsa_pem(PRIVATE_KEY).unwrap();
        format!("Bearer {}", jsonwebtoken::encode(&header, &claims(json!({})), &key).unwrap())
    };
    for typ in [None, Some("JWT"), Some("at+jwt"), Some("application/at+JWT")] {
        assert_eq!(env.whoami(Some(&typed(typ))).await.status, 200, "{typ:?} is an access token");
    }
    for typ in ["dpop+jwt", "logout+jwt", "secevent+jwt", "id_token", ""] {
        let reply = env.whoami(Some(&typed(Some(typ)))).await;
        assert_eq!(reply.status, 401, "{typ:?} is not an access token");
    }
}

/// The metadata advertises every scope a client may be asked for: the route's and each tool's
/// (`scopes_supported` was empty by default). An explicit `MCP_AUTH_SCOPES_SUPPORTED` wins.
#[tokio::test]
async fn the_metadata_lists_the_route_and_tool_scopes() {
    let env = env("required", "mcp:read").await;
    let document = env.server.request("GET", "/.well-known/oauth-protected-resource").send().await.json();
    let scopes: Vec<&str> = document["scopes_supported"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for scope in ["mcp:read", "mcp:write", "invoices:read", "refunds:write"] {
        assert!(scopes.contains(&scope), "{scope} advertised: {scopes:?}");
    }
    let (jwks_url, _) = stub_jwks().await;
    let config = auth_config(jwks_url, &[("MCP_AUTH_SCOPES_SUPPORTED", "only:this")]);
    let server = TestServer::start_routes(Routes::with_mcp(common::everything_app(&config))).await;
    let fixed = server.request("GET", "/.well-known/oauth-protected-resource").send().await.json();
    assert_eq!(fixed["scopes_supported"], json!(["only:this"]));
}

/// Resources carry scopes like tools: db-adapter's `product://{product_id}` needs `mcp:read`, as
/// its tools do. A caller without it does not see the template listed, and a read is refused
/// with the same 403 `insufficient_scope` challenge as a tool call, before the handler runs;
/// in `optional` mode an anonymous caller (no token) is refused too, with a 401 naming the scope.
#[tokio::test]
async fn resources_are_listed_and_read_only_with_their_scopes() {
    for mode in ["required", "optional"] {
        let env = env(mode, "").await;
        let send = |method: &str, params: Value, bearer: Option<String>| {
            let mut call = env.server.modern(json!(1), method, params);
            if let Some(bearer) = bearer {
                call = call.header("Authorization", &bearer);
            }
            call.send()
        };
        let none = Some(bearer("alice", ""));
        let reader = Some(bearer("alice", "mcp:read"));
        let callers = if mode == "optional" { vec![none.clone(), None] } else { vec![none.clone()] };
        for caller in callers {
            let read = send("resources/read", json!({"uri": "product://1"}), caller.clone()).await;
            // No token: no error code in the challenge (RFC 6750 §3.1).
            let (status, error) = if caller.is_some() { (403, Some("insufficient_scope")) } else { (401, None) };
            assert_eq!(read.status, status, "{mode} {caller:?}: {}", read.text());
            assert_eq!(challenge(&read).get("error").map(String::as_str), error);
            assert_eq!(challenge(&read)["scope"], "mcp:read");
            assert!(!read.text().contains("found"), "no row in the refusal");
            let templates = send("resources/templates/list", json!({}), caller.clone()).await.json();
            let listed = templates["result"]["resourceTemplates"].as_array().unwrap();
            assert!(listed.iter().all(|t| t["uriTemplate"] != "product://{product_id}"), "{mode}: {templates}");
        }
        let read = send("resources/read", json!({"uri": "product://1"}), reader.clone()).await;
        assert_eq!(read.status, 200, "{}", read.text());
        assert!(read.json()["result"]["contents"][0]["text"].as_str().unwrap().contains("found"));
        let templates = send("resources/templates/list", json!({}), reader).await.json();
        assert!(
            templates["result"]["resourceTemplates"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["uriTemplate"] == "product://{product_id}")
        );
    }
}

/// Each MCP endpoint is its own protected resource (RFC 8707, RFC 9728): a token for `/api/mcp`
/// is refused at an example's route and the other way round, each route challenges with its
/// own metadata document, that document names the route, and route scopes are per endpoint.
#[tokio::test]
async fn every_endpoint_is_its_own_protected_resource() {
    let (jwks_url, _) = stub_jwks().await;
    let config =
        auth_config(jwks_url, &[("MCP_AUTH_MODE", "required"), ("MCP_AUTH_SCOPES_SECURE_TOOLS", "items:admin")]);
    let server = TestServer::start_routes(Routes::new(&config)).await;
    let example = "https://mcp.example.com/api/examples/auth-server";
    let whoami = |path: &str, aud: &str| {
        server
            .modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}))
            .at(path)
            .header("Authorization", &format!("Bearer {}", token(json!({"aud": aud}))))
            .send()
    };
    let at_example = whoami("/api/examples/auth-server", RESOURCE).await;
    assert_eq!(at_example.status, 401, "a token for /api/mcp is not one for the example: {}", at_example.text());
    assert_eq!(
        challenge(&at_example)["resource_metadata"],
        "https://mcp.example.com/.well-known/oauth-protected-resource/api/examples/auth-server"
    );
    assert_eq!(whoami("/api/examples/auth-server", example).await.status, 200, "its own token is");
    assert_eq!(whoami("/api/mcp", example).await.status, 401, "and that token is refused at /api/mcp");
    assert_eq!(whoami("/api/mcp", RESOURCE).await.status, 200);
    // The same token, once verified at /api/mcp, is still refused at the example (no shared cache).
    assert_eq!(whoami("/api/examples/auth-server", RESOURCE).await.status, 401);

    let document = server.request("GET", "/.well-known/oauth-protected-resource/api/examples/auth-server").send().await;
    assert_eq!(document.status, 200);
    assert_eq!(document.json()["resource"], example);
    assert!(document.json()["scopes_supported"].as_array().unwrap().contains(&json!("mcp:read")));
    assert_eq!(
        server.request("GET", "/.well-known/oauth-protected-resource/api/examples/nope").send().await.status,
        404
    );

    // Route scopes per endpoint: secure-tools needs items:admin on every request, auth-server not.
    let secure = server
        .modern(json!(1), "tools/list", json!({}))
        .at("/api/examples/secure-tools")
        .header(
            "Authorization",
            &format!("Bearer {}", token(json!({"aud": "https://mcp.example.com/api/examples/secure-tools"}))),
        )
        .send()
        .await;
    assert_eq!(secure.status, 403, "{}", secure.text());
    assert_eq!(challenge(&secure)["scope"], "items:admin");
}

/// Key rotation against a JWKS whose answers the test controls, on an injected clock (cache
/// lifetime 300 s, refetch floor 30 s): a key published after start-up is found by one refetch
/// once the floor has passed, not before; a second unknown kid right after costs no fetch; a
/// stale cache is refetched; a failed refetch keeps the keys already held; a key the JWKS drops
/// is refused after the next refetch.
/// Parts that verify tokens with the keys of the JWKS served at `addr`, on `clock`.
fn fetching_keys_from(addr: std::net::SocketAddr, clock: &Arc<vercel_mcp::state::ManualClock>) -> Parts {
    let vars: HashMap<&str, String> = HashMap::from([
        ("MCP_RESOURCE_URL", RESOURCE.to_owned()),
        ("MCP_AUTH_ISSUER", ISSUER.to_owned()),
        ("MCP_JWKS_URL", format!("http://{addr}/jwks.json")),
        ("MCP_STATE_SECRET", "auth=0123456789abcdef0123456789abcdef".to_owned()),
    ]);
    Parts::from_lookup(|name| vars.get(name).cloned(), clock.clone()).unwrap()
}

/// A JWKS on loopback answering whatever status and body the test sets (`status` and `body` at
/// first), counting its fetches.
async fn answering_jwks(
    status: u16,
    body: &str,
) -> (std::net::SocketAddr, Arc<std::sync::Mutex<(u16, String)>>, Arc<AtomicUsize>) {
    let served = Arc::new(std::sync::Mutex::new((status, body.to_owned())));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (answer, counter) = (served.clone(), fetches.clone());
    let addr = common::upstream::serve(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        let (status, body) = answer.lock().unwrap().clone();
        async move { (status, bytes::Bytes::from(body)) }
    })
    .await;
    (addr, served, fetches)
}

#[tokio::test]
async fn jwks_rotation_refetches_when_it_should_and_only_then() {
    let (addr, served, fetches) = answering_jwks(200, JWKS).await;
    let clock = Arc::new(vercel_mcp::state::ManualClock::new(NOW * 1000));
    let config = fetching_keys_from(addr, &clock);
    let now = || vercel_mcp::state::Clock::now_ms(clock.as_ref()) / 1000;
    let signed = |kid: &str| rs256(&claims(json!({"iat": now(), "exp": now() + 600})), kid);
    let verify = |token: String| {
        let auth = config.settings.auth.clone();
        async move { auth.verify(&token).await.is_ok() }
    };
    let mut both: Value = serde_json::from_str(JWKS).unwrap();
    let mut second = both["keys"][0].clone();
    second["kid"] = json!("test-rsa-2");
    both["keys"].as_array_mut().unwrap().push(second);
    let both_keys = both.to_string();

    assert!(verify(signed("test-rsa-1")).await, "the first key");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    *served.lock().unwrap() = (200, both_keys.clone());
    clock.advance_ms(1_000);
    assert!(!verify(signed("test-rsa-2")).await, "within the floor the new key is not fetched yet");
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "no refetch inside the floor");
    clock.advance_ms(30_000);
    assert!(verify(signed("test-rsa-2")).await, "published after start-up: found by one refetch");
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
    assert!(!verify(signed("test-rsa-3")).await, "an unknown kid");
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "right after a refetch, an unknown kid costs no fetch");
    // The cache lifetime runs out while the JWKS is down: the held keys stay usable.
    *served.lock().unwrap() = (500, String::new());
    clock.advance_ms(300_000);
    assert!(verify(signed("test-rsa-1")).await, "a failed refetch keeps the keys already held");
    assert_eq!(fetches.load(Ordering::SeqCst), 3, "a stale cache is refetched");
    // The next refetch drops the first key.
    *served.lock().unwrap() = (200, JWKS.replace("test-rsa-1", "test-rsa-2"));
    clock.advance_ms(300_000);
    assert!(!verify(signed("test-rsa-1")).await, "a key the JWKS no longer lists is refused");
    assert!(verify(signed("test-rsa-2")).await);
    assert_eq!(fetches.load(Ordering::SeqCst), 4);
    // A set with no usable key left (every key revoked, or only keys for other uses) drops the
    // keys held: nothing the issuer no longer publishes stays trusted.
    let encryption_only = JWKS.replace("test-rsa-1", "test-rsa-2").replace(r#""use": "sig""#, r#""use": "enc""#);
    assert!(encryption_only.contains(r#""use": "enc""#), "the fixture names its key's use");
    for (fetch, revoked) in [(5, r#"{"keys":[]}"#.to_owned()), (6, encryption_only)] {
        *served.lock().unwrap() = (200, JWKS.replace("test-rsa-1", "test-rsa-2"));
        clock.advance_ms(300_000);
        assert!(verify(signed("test-rsa-2")).await, "held before the revocation");
        *served.lock().unwrap() = (200, revoked.clone());
        clock.advance_ms(300_000);
        assert!(!verify(signed("test-rsa-2")).await, "a set without it refuses it: {revoked}");
        assert_eq!(fetches.load(Ordering::SeqCst), fetch * 2 - 4);
    }
}

/// A token naming a key this server does not hold, while the issuer's keys cannot be fetched,
/// is neither accepted nor called invalid: 503 with `Retry-After` (when the next fetch may begin)
/// and no challenge, so the client keeps its token and comes back. A held key still verifies
/// meanwhile; once the JWKS answers, a key it does not publish is `invalid_token` again.
#[tokio::test]
async fn a_token_whose_keys_cannot_be_fetched_is_asked_to_come_back_not_refused() {
    let (addr, served, fetches) = answering_jwks(503, "").await;
    let clock = Arc::new(vercel_mcp::state::ManualClock::new(NOW * 1000));
    let mut config = fetching_keys_from(addr, &clock);
    let logs = Arc::new(MemorySink::default());
    config.log_sink = logs.clone();
    let server = TestServer::start_routes(Routes::with_mcp(common::everything_app(&config))).await;
    let now = || vercel_mcp::state::Clock::now_ms(clock.as_ref()) / 1000;
    let signed = |kid: &str| format!("Bearer {}", rs256(&claims(json!({"iat": now(), "exp": now() + 600})), kid));
    let whoami = |authorization: String| {
        server
            .modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}))
            .header("Authorization", &authorization)
            .send()
    };
    let come_back = |reply: &common::Reply, retry_after: &str, case: &str| {
        assert_eq!(reply.status, 503, "{case}");
        assert_eq!(reply.header("retry-after"), Some(retry_after), "{case}");
        assert_eq!(reply.header("www-authenticate"), None, "{case}: no other credential is asked for");
        let body: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["error"], "temporarily_unavailable", "{case}");
    };

    // A new instance whose first fetch fails: its callers are asked to come back when the next
    // fetch may begin, and those within the floor cost no fetch.
    come_back(&whoami(signed("test-rsa-1")).await, "30", "the first fetch failed");
    clock.advance_ms(10_500);
    come_back(&whoami(signed("test-rsa-1")).await, "20", "within the floor");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    // The JWKS answers again: the next fetch brings the key.
    *served.lock().unwrap() = (200, JWKS.to_owned());
    clock.advance_ms(20_000);
    assert_eq!(whoami(signed("test-rsa-1")).await.status, 200);
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
    // Down again: a held key verifies; one not held may be one the issuer publishes.
    *served.lock().unwrap() = (500, String::new());
    clock.advance_ms(31_000);
    come_back(&whoami(signed("test-rsa-9")).await, "30", "a key not held while the JWKS is down");
    assert_eq!(fetches.load(Ordering::SeqCst), 3);
    assert_eq!(whoami(signed("test-rsa-1")).await.status, 200, "a held key while the JWKS is down");
    // Up: a key the set does not publish is refused as invalid.
    *served.lock().unwrap() = (200, JWKS.to_owned());
    clock.advance_ms(31_000);
    let refused = whoami(signed("test-rsa-9")).await;
    assert_eq!(refused.status, 401);
    assert!(refused.header("www-authenticate").unwrap().contains(r#"error="invalid_token""#));
    assert_eq!(fetches.load(Ordering::SeqCst), 4);
    // Each 503 is a request line at level error; none is counted as a refused credential.
    let lines: Vec<Value> = logs.lines().into_iter().filter(|line| line["status"] == 503).collect();
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|line| line["level"] == "error" && line["outcome"] != "auth_failure"), "{lines:?}");
}

/// A JWKS whose answers the test holds back: it counts the fetches, serves `served`, and while
/// `hold` is set answers a fetch only once `release` is notified.
struct HeldJwks {
    addr: std::net::SocketAddr,
    fetches: Arc<AtomicUsize>,
    served: Arc<std::sync::Mutex<String>>,
    hold: Arc<std::sync::atomic::AtomicBool>,
    release: Arc<tokio::sync::Notify>,
}

async fn held_jwks() -> HeldJwks {
    let fetches = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(std::sync::Mutex::new(JWKS.to_owned()));
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let release = Arc::new(tokio::sync::Notify::new());
    let (counter, answer, held, released) = (fetches.clone(), served.clone(), hold.clone(), release.clone());
    let addr = common::upstream::serve(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        let (answer, held, released) = (answer.clone(), held.load(Ordering::SeqCst), released.clone());
        async move {
            if held {
                released.notified().await;
            }
            let body = answer.lock().unwrap().clone();
            (200, bytes::Bytes::from(body))
        }
    })
    .await;
    HeldJwks { addr, fetches, served, hold, release }
}

/// A burst of tokens naming unknown `kid`s while a refetch is under way costs that one fetch: the
/// requests that waited for it use its answer, whatever the clock read when each arrived.
#[tokio::test]
async fn requests_waiting_for_a_jwks_refetch_do_not_fetch_again() {
    let HeldJwks { addr, fetches, hold, release, .. } = held_jwks().await;
    let clock = Arc::new(vercel_mcp::state::ManualClock::new(NOW * 1000));
    let config = fetching_keys_from(addr, &clock);
    let now = vercel_mcp::state::Clock::now_ms(clock.as_ref()) / 1000;
    let signed = |kid: &str| rs256(&claims(json!({"iat": now, "exp": now + 600})), kid);
    assert!(config.settings.auth.verify(&signed("test-rsa-1")).await.is_ok(), "the first fetch");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);

    // Past the refetch floor, one unknown kid starts a refetch that the JWKS answers slowly.
    clock.advance_ms(31_000);
    hold.store(true, Ordering::SeqCst);
    let first = tokio::spawn({
        let (auth, token) = (config.settings.auth.clone(), signed("unknown-0"));
        async move { auth.verify(&token).await.is_ok() }
    });
    while fetches.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    // More arrive while it is under way, each a little later by the clock.
    let mut waiting = Vec::new();
    for i in 1..=8 {
        clock.advance_ms(1);
        let (auth, token) = (config.settings.auth.clone(), signed(&format!("unknown-{i}")));
        waiting.push(tokio::spawn(async move { auth.verify(&token).await.is_ok() }));
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    hold.store(false, Ordering::SeqCst);
    release.notify_one();
    assert!(!first.await.unwrap(), "an unknown kid is refused");
    for request in waiting {
        assert!(!request.await.unwrap(), "an unknown kid is refused");
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "one refetch for the whole burst");
}

/// A refetch whose caller left midway (the request's future dropped, as when its client
/// disconnects) goes on without it: it still counts toward the refetch floor, so callers that
/// leave at once cannot make the server fetch the JWKS without limit, and its answer still
/// arrives, so they cannot keep the keys from being refreshed either. A caller naming an unknown
/// `kid` meanwhile waits for that fetch rather than fetch again.
#[tokio::test]
async fn a_refetch_outlives_a_caller_that_leaves() {
    let HeldJwks { addr, fetches, served, hold, release } = held_jwks().await;
    let clock = Arc::new(vercel_mcp::state::ManualClock::new(NOW * 1000));
    let config = fetching_keys_from(addr, &clock);
    let now = vercel_mcp::state::Clock::now_ms(clock.as_ref()) / 1000;
    let signed = |kid: &str| rs256(&claims(json!({"iat": now, "exp": now + 600})), kid);
    let verify = |token: String| {
        let auth = config.settings.auth.clone();
        async move { auth.verify(&token).await.is_ok() }
    };
    assert!(verify(signed("test-rsa-1")).await, "the first fetch");

    // Past the floor, a second key is published, and a caller naming it begins a refetch that
    // the JWKS answers slowly; the caller leaves before the answer.
    let mut both: Value = serde_json::from_str(JWKS).unwrap();
    let mut second = both["keys"][0].clone();
    second["kid"] = json!("test-rsa-2");
    both["keys"].as_array_mut().unwrap().push(second);
    *served.lock().unwrap() = both.to_string();
    clock.advance_ms(31_000);
    hold.store(true, Ordering::SeqCst);
    let leaving = tokio::spawn(verify(signed("test-rsa-2")));
    let began = async {
        while fetches.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
    };
    common::bounded("the refetch begins", began).await;
    leaving.abort();
    assert!(leaving.await.unwrap_err().is_cancelled());
    // Callers meanwhile: a known key is answered from the keys held at once; an unknown `kid`
    // waits for the fetch under way.
    assert!(common::bounded("a known key", verify(signed("test-rsa-1"))).await, "a known key does not wait");
    let waiting = tokio::spawn(verify(signed("test-rsa-2")));
    hold.store(false, Ordering::SeqCst);
    release.notify_one();
    assert!(
        common::bounded("the waiting caller", waiting).await.unwrap(),
        "the fetch the first caller began brought the new key"
    );
    assert!(verify(signed("test-rsa-2")).await);
    assert!(!verify(signed("unknown")).await, "an unknown kid within the floor");
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "one refetch in all: nobody fetched again within the floor");
    // Past the floor, the next unknown kid fetches again.
    clock.advance_ms(30_000);
    assert!(!verify(signed("unknown-2")).await);
    assert_eq!(fetches.load(Ordering::SeqCst), 3);
}

/// The token checks the matrix above does not reach: `iat` more than a minute ahead, the size
/// cap, a header algorithm other than the key's, `scp` (array and string) and `azp` in place of
/// `scope` and `client_id`, and an ES256 key from the JWKS.
#[tokio::test]
async fn token_claims_algorithms_and_size_beyond_the_matrix() {
    use base64::Engine;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    // An EC key made for this test, published beside the RSA one.
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let point = pair.public_key().as_ref(); // 0x04 || x || y
    let mut jwks: Value = serde_json::from_str(JWKS).unwrap();
    jwks["keys"].as_array_mut().unwrap().push(json!({
        "kty": "EC", "crv": "P-256", "kid": "test-ec-1", "use": "sig", "alg": "ES256",
        "x": b64(&point[1..33]), "y": b64(&point[33..65]),
    }));
    let served = jwks.to_string();
    let addr = common::upstream::serve(move |_| {
        let body = served.clone();
        async move { (200, bytes::Bytes::from(body)) }
    })
    .await;
    // RS384 and ES384 are allowed here, so a header naming them is refused for not being the
    // key's algorithm, not for being off the list.
    let config = auth_config(
        format!("http://{addr}/jwks.json"),
        &[("MCP_AUTH_MODE", "required"), ("MCP_AUTH_ALGORITHMS", "RS256,RS384,ES256,ES384")],
    );
    let server = TestServer::start_routes(Routes::with_mcp(common::everything_app(&config))).await;
    let whoami = |token: String| {
        server
            .modern(json!(1), "tools/call", json!({"name": "whoami", "arguments": {}}))
            .header("Authorization", &format!("Bearer {token}"))
            .send()
    };
    let es256 = |claims: &Value| {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("test-ec-1".into());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(pkcs8.as_ref())).unwrap()
    };
    let ok = whoami(es256(&claims(json!({})))).await;
    assert_eq!(ok.status, 200, "an ES256 key from the JWKS: {}", ok.text());

    let who = |reply: &common::Reply| -> Value {
        serde_json::from_str(reply.json()["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    };
    let scp_array =
        whoami(token(json!({"scope": null, "scp": ["mcp:read", "x:y"], "client_id": null, "azp": "app-azp"}))).await;
    assert_eq!(scp_array.status, 200, "{}", scp_array.text());
    assert_eq!(who(&scp_array), json!({"clientId": "app-azp", "scopes": ["mcp:read", "x:y"]}), "scp and azp are read");
    let scp_string = whoami(token(json!({"scope": null, "scp": "mcp:read other"}))).await;
    assert_eq!(who(&scp_string)["scopes"], json!(["mcp:read", "other"]));

    for (case, bad) in [
        ("iat two minutes ahead", token(json!({"iat": NOW + 120, "exp": NOW + 600}))),
        ("RS256 key, RS384 header", {
            let mut header = Header::new(Algorithm::RS384);
            header.kid = Some("test-rsa-1".into());
            jsonwebtoken::encode(&header, &claims(json!({})), &EncodingKey::from_rsa_pem(PRIVATE_KEY).unwrap()).unwrap()
        }),
        ("ES256 key, ES384 header", {
            let mut header = Header::new(Algorithm::ES384);
            header.kid = Some("test-ec-1".into());
            format!(
                "{}.{}.{}",
                b64(serde_json::to_string(&header).unwrap().as_bytes()),
                b64(claims(json!({})).to_string().as_bytes()),
                b64(&[0; 96])
            )
        }),
        ("over 16 KiB", token(json!({"padding": "x".repeat(17 * 1024)}))),
    ] {
        assert_eq!(whoami(bad).await.status, 401, "{case}");
    }
    assert_eq!(
        whoami(token(json!({"iat": NOW + 30, "exp": NOW + 600}))).await.status,
        200,
        "a little clock skew passes"
    );
    for skewed in [json!({"nbf": NOW + 60}), json!({"iat": NOW + 60, "nbf": NOW + 60, "exp": NOW + 600})] {
        assert_eq!(whoami(token(skewed.clone())).await.status, 200, "an issuer's clock up to 60 s ahead: {skewed}");
    }
    assert_eq!(whoami(token(json!({"iat": NOW + 61, "exp": NOW + 600}))).await.status, 401, "iat past the skew");
}

/// A listen stream lasts no longer than the token that opened it: one whose token expires in a
/// second closes with its result then, minutes before the listen limit, so notifications stop
/// with the credential and the client comes back with a fresh token, as for any other request.
#[tokio::test]
async fn a_listen_stream_closes_when_its_token_expires() {
    let env = env("required", "").await;
    let expiring = token(json!({"exp": NOW + 1}));
    let (status, _, mut stream) = env
        .server
        .modern(json!(7), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}))
        .header("Authorization", &format!("Bearer {expiring}"))
        .open()
        .await;
    assert_eq!(status, 200);
    let events = common::bounded("the stream's close", common::read_until_answer(&mut stream)).await;
    assert_eq!(events[0]["method"], "notifications/subscriptions/acknowledged", "{events:?}");
    let answer = events.last().unwrap();
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7, "the graceful result: {answer}");
}
