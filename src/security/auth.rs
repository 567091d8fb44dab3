//! OAuth 2.1 resource-server authentication: bearer JWTs in, a [`Principal`] or a challenge out.
//!
//! A token is accepted only if every check passes, in this order: the `Authorization` scheme is
//! Bearer; the header names an allowed algorithm (asymmetric by default; `none` and algorithm
//! confusion never pass); the key is found by `kid` (a JWKS URL is refetched once, rate-limited,
//! for an unknown `kid`); the signature verifies; `iss` is exactly the configured issuer; `aud`
//! is one value naming the canonical resource (RFC 8707; compared as normalised URLs); `exp` is
//! in the future (a token is expired at its `exp` second, no leeway); `nbf`, if present, has
//! passed (or is at most 60 s ahead, as `iat` may be); the lifetime is at most the maximum.
//! Failures produce one generic 401 (the reason is never sent), a missing route scope a 403
//! `insufficient_scope`. The token itself is never logged, echoed or written to a store; a token
//! that verified is held in this instance's memory so that its uses in the next 300 s skip the
//! signature check (`verified.rs` says how long its bytes stay).

use http::{HeaderMap, StatusCode, header};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Principal;
use super::jwks::JwksCache;
use super::resource::CanonicalResource;
use super::verified::{VERIFIED_TTL_SECS, VerifiedTokens};
use crate::state::Clock;

/// How far ahead of this server's clock an issuer's may run: a token's `nbf` and `iat` may be
/// this many seconds in the future (issuers that set `nbf` to `iat` would otherwise see their fresh
/// tokens refused for as long as their clock is ahead). `exp` has no leeway.
pub const CLOCK_SKEW_SECS: u64 = 60;

/// The longest bearer token verified; a longer one is invalid unread. It also bounds how long a
/// principal's id can be ([`super::principal::MAX_ID_BYTES`]).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Whether requests must, may or need not carry a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// Every request needs a valid token (the default when deployed).
    Required,
    /// A valid token identifies the caller; none means the anonymous principal (reduced rights).
    /// An invalid token is still refused.
    Optional,
    /// No authentication: everyone is anonymous (the default of the local run).
    Off,
}

/// Where verification keys come from.
#[derive(Clone)]
pub enum KeySource {
    /// A JWKS given inline (`MCP_JWKS`).
    Inline(Arc<HashMap<String, (DecodingKey, Algorithm)>>),
    /// A JWKS URL (`MCP_JWKS_URL`), fetched and cached.
    Url(Arc<JwksCache>),
    /// A shared HS256 secret: local development only, refused when deployed.
    DevSecret(DecodingKey),
}

/// Everything token verification needs, parsed once.
#[derive(Clone)]
pub struct AuthConfig {
    /// Required, optional or off.
    pub mode: AuthMode,
    /// The audience tokens must name.
    pub resource: CanonicalResource,
    /// The exact `iss`.
    pub issuer: String,
    /// Accepted algorithms.
    pub algorithms: Vec<Algorithm>,
    /// Verification keys.
    pub keys: Option<KeySource>,
    /// Longest accepted token lifetime in seconds.
    pub max_lifetime_secs: u64,
    /// Scopes every request needs.
    pub route_scopes: Vec<String>,
    /// Authorization servers advertised in the metadata.
    pub authorization_servers: Vec<String>,
    /// Scopes advertised in the metadata.
    pub scopes_supported: Vec<String>,
    /// Whether `MCP_AUTH_SCOPES_SUPPORTED` fixed that list; otherwise each endpoint adds the
    /// scopes its tools require ([`Authenticator::advertising`]).
    pub scopes_supported_configured: bool,
    /// `MCP_AUTH_CLIENT_CREDENTIALS=on`: tokens without a subject identify their OAuth client (a
    /// client-credentials deployment, where each client is one caller). Off, such a token is
    /// refused, so two users of one client can never share jobs, tasks or items.
    pub client_credentials: bool,
}

/// The token's subject as the principal's identity: `Some(Some(sub))` for a usable subject (a
/// non-empty string without control characters, or an integer, read as its decimal text);
/// `Some(None)` for no subject where the deployment takes client-credentials tokens; `None`
/// (refuse the token) otherwise. Falling back to the client id would make every user of one OAuth
/// client the same principal.
fn subject_of(sub: Option<&Value>, client_credentials: bool) -> Option<Option<String>> {
    match sub {
        Some(Value::String(sub)) if !sub.is_empty() && !sub.chars().any(char::is_control) => Some(Some(sub.clone())),
        Some(Value::Number(sub)) if sub.is_u64() || sub.is_i64() => Some(Some(sub.to_string())),
        None if client_credentials => Some(None),
        Some(Value::String(sub)) if sub.is_empty() && client_credentials => Some(None),
        _ => None,
    }
}

/// Reads an `Authorization` value. `None` when its scheme (what comes before the first space or
/// tab, compared without case) is not Bearer; for Bearer, the token: after a space, without the
/// spaces and tabs around it, or `None` when there is none.
fn bearer(value: &[u8]) -> Option<Option<&[u8]>> {
    let end = value.iter().position(|&b| b == b' ' || b == b'\t').unwrap_or(value.len());
    let (scheme, rest) = value.split_at(end);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let token = rest.strip_prefix(b" ").and_then(|token| {
        let start = token.iter().position(|b| !is_space(b))?;
        let end = token.iter().rposition(|b| !is_space(b))? + 1;
        Some(&token[start..end])
    });
    Some(token)
}

/// The JOSE `typ` of a token this server accepts as an access token: none, `JWT`, or RFC 9068's
/// `at+jwt` (also as `application/at+jwt`), compared without case. Any other type (`dpop+jwt`,
/// `logout+jwt`, `secevent+jwt`, …) is a token made for something else, signed by the same issuer.
/// RFC 9068 alone is not required: many authorization servers still mark access tokens `JWT`.
fn is_access_token_type(typ: Option<&str>) -> bool {
    let Some(typ) = typ else { return true };
    let typ = typ.strip_prefix("application/").unwrap_or(typ);
    typ.eq_ignore_ascii_case("JWT") || typ.eq_ignore_ascii_case("at+jwt")
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            None => "none",
            Some(KeySource::Inline(_)) => "inline JWKS",
            Some(KeySource::Url(_)) => "JWKS URL",
            Some(KeySource::DevSecret(_)) => "HS256 development secret",
        };
        f.debug_struct("AuthConfig")
            .field("mode", &self.mode)
            .field("resource", &self.resource.url())
            .field("issuer", &self.issuer)
            .field("keys", &keys)
            .finish_non_exhaustive()
    }
}

/// The description of the `invalid_token` refusal of a token that was good until it expired (a
/// refresh is all its holder needs); every other invalid token gets one description that says
/// nothing of why.
pub const TOKEN_EXPIRED: &str = "the access token expired";

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401 `invalid_token` (a malformed, unverifiable, expired or foreign bearer token).
    InvalidToken(&'static str),
    /// 400 `invalid_request` (RFC 6750 §3.1): the request repeats its credentials. Not
    /// `invalid_token`, which tells a client to get a new token: the token was never read.
    InvalidRequest(&'static str),
    /// 401 without an error code for a caller who sent no credentials, or credentials of a
    /// scheme other than Bearer (RFC 6750 §3.1: such a request gets no error information),
    /// naming the scopes to ask for: those of the route, or of the tool or resource an
    /// anonymous caller (`optional` mode) asked for. A token is what is missing, not a scope of
    /// one, and a 401 is what starts a client's authorization flow.
    TokenRequired(Vec<String>),
    /// 403 `insufficient_scope`, naming the scopes needed.
    InsufficientScope(Vec<String>),
    /// 503 with `Retry-After`: the token names a key this server does not hold, and the issuer's
    /// keys could not be fetched, so whether it is valid cannot be told yet. Not `invalid_token`,
    /// which would have the client throw away a token that may be good.
    KeysUnavailable {
        /// Seconds until the keys are fetched again.
        retry_after_secs: u64,
    },
}

/// A refusal as the client is told it (RFC 6750 §3): the transport renders it as the status,
/// the `WWW-Authenticate` header and a small JSON body.
#[derive(Debug, PartialEq, Eq)]
pub struct Challenge {
    /// 401 or 403; 400 for repeated credentials; 503 when the keys could not be fetched.
    pub status: StatusCode,
    /// `invalid_token`, `invalid_request`, `insufficient_scope` or `temporarily_unavailable`;
    /// none when the request carried no credentials.
    pub error: Option<&'static str>,
    /// A fixed description (never request data).
    pub description: &'static str,
    /// The `Bearer …` challenge, with the scopes to ask for and the metadata URL (not sent with
    /// a 503, which asks for no other credential).
    pub www_authenticate: String,
}

/// Authenticates requests and builds challenges.
#[derive(Clone, Debug)]
pub struct Authenticator {
    config: AuthConfig,
    clock: Arc<dyn Clock>,
    verified: Arc<VerifiedTokens>,
}

impl Authenticator {
    /// An authenticator over `config`.
    pub fn new(config: AuthConfig, clock: Arc<dyn Clock>) -> Self {
        Self { config, clock, verified: Arc::default() }
    }

    /// The configuration.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// This deployment's authenticator for another MCP endpoint at `path`: tokens must name that
    /// endpoint as their audience, `route_scopes` are its own, and verifications are cached apart
    /// (a token verified for one endpoint is never taken from the cache at another).
    pub fn for_endpoint(&self, path: &str, route_scopes: Vec<String>) -> Self {
        let mut config = self.config.clone();
        config.resource = config.resource.endpoint(path);
        if !config.scopes_supported_configured {
            config.scopes_supported = route_scopes.clone();
        }
        config.route_scopes = route_scopes;
        Self { config, clock: self.clock.clone(), verified: Arc::default() }
    }

    /// This authenticator, with `scopes` (those an endpoint's tools require) added to the
    /// metadata's `scopes_supported` unless `MCP_AUTH_SCOPES_SUPPORTED` fixed the list; so a
    /// client learns every scope it may be asked for. Shares the verified-token cache.
    pub fn advertising(&self, scopes: &[String]) -> Self {
        let mut config = self.config.clone();
        if !config.scopes_supported_configured {
            for scope in scopes {
                if !config.scopes_supported.contains(scope) {
                    config.scopes_supported.push(scope.clone());
                }
            }
        }
        Self { config, clock: self.clock.clone(), verified: self.verified.clone() }
    }

    /// Whether per-tool scopes apply (authentication is on).
    pub fn enforces_scopes(&self) -> bool {
        self.config.mode != AuthMode::Off
    }

    /// Establishes the caller of a request.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
        if self.config.mode == AuthMode::Off {
            return Ok(Principal::anonymous());
        }
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let token_required = || Refusal::TokenRequired(self.config.route_scopes.clone());
        let (Some(value), None) = (values.next(), values.next()) else {
            return match (headers.contains_key(header::AUTHORIZATION), self.config.mode) {
                (true, _) => Err(Refusal::InvalidRequest("send one Authorization header")),
                // Anonymous callers are admitted where the route asks for no scope: one that
                // does asks every request for it, and an anonymous caller holds none.
                (false, AuthMode::Optional) if self.config.route_scopes.is_empty() => Ok(Principal::anonymous()),
                (false, _) => Err(token_required()),
            };
        };
        const NOT_BEARER: Refusal = Refusal::InvalidToken("the Authorization header must be Bearer and a token");
        let token = bearer(value.as_bytes()).ok_or_else(token_required)?.ok_or(NOT_BEARER)?;
        let principal = match self.verified.lookup(token, self.clock.now_ms() / 1000) {
            Some(principal) => principal,
            None => {
                // A remembered token passed this on its first use, so only a new one pays for it:
                // the whole value must be visible ASCII.
                value.to_str().map_err(|_| NOT_BEARER)?;
                let token = std::str::from_utf8(token).expect("a slice of visible ASCII is UTF-8");
                // Boxed: a key fetch makes this the largest future of a request, and a remembered
                // token, which most requests carry, never awaits it.
                Box::pin(self.verify_and_remember(token)).await?
            }
        };
        let missing: Vec<String> =
            self.config.route_scopes.iter().filter(|s| !principal.scopes().contains(s)).cloned().collect();
        if !missing.is_empty() {
            return Err(Refusal::InsufficientScope(self.config.route_scopes.clone()));
        }
        Ok(principal)
    }

    /// How long `principal`'s credential stays valid by this authenticator's clock: `None` for a
    /// caller without one (the anonymous caller, or authentication off), zero once it expired.
    pub fn credential_remaining(&self, principal: &Principal) -> Option<Duration> {
        let exp_ms = principal.expires_at()?.saturating_mul(1000);
        Some(Duration::from_millis(exp_ms.saturating_sub(self.clock.now_ms())))
    }

    /// [`Authenticator::verify`], remembering a success for the token's next use.
    async fn verify_and_remember(&self, token: &str) -> Result<Principal, Refusal> {
        let (principal, exp) = self.verify_with_expiry(token).await?;
        let now = self.clock.now_ms() / 1000;
        self.verified.remember(token.as_bytes(), principal.clone(), exp.min(now + VERIFIED_TTL_SECS), now);
        Ok(principal)
    }

    /// Verifies a bearer token; a refusal carries a fixed description, never the token's content.
    pub async fn verify(&self, token: &str) -> Result<Principal, Refusal> {
        self.verify_with_expiry(token).await.map(|(principal, _)| principal)
    }

    async fn verify_with_expiry(&self, token: &str) -> Result<(Principal, u64), Refusal> {
        const INVALID: Refusal = Refusal::InvalidToken("the access token is invalid or expired");
        if token.len() > MAX_TOKEN_BYTES {
            return Err(INVALID);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| INVALID)?;
        if !self.config.algorithms.contains(&header.alg) || !is_access_token_type(header.typ.as_deref()) {
            return Err(INVALID);
        }
        let key = match self.config.keys.as_ref().ok_or(INVALID)? {
            KeySource::DevSecret(key) => key.clone(),
            KeySource::Inline(keys) => {
                let (key, alg) = keys.get(header.kid.as_deref().ok_or(INVALID)?).ok_or(INVALID)?;
                if *alg != header.alg {
                    return Err(INVALID);
                }
                key.clone()
            }
            KeySource::Url(cache) => {
                let found = cache.key(header.kid.as_deref().ok_or(INVALID)?).await;
                let found = found.map_err(|unavailable| Refusal::KeysUnavailable {
                    retry_after_secs: unavailable.retry_after_secs,
                })?;
                let (key, alg) = found.ok_or(INVALID)?;
                if alg != header.alg {
                    return Err(INVALID);
                }
                key
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.leeway = 0;
        let claims = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|_| INVALID)?.claims;
        let now = self.clock.now_ms() / 1000;
        if let Some(accepted) = self.check_claims(&claims, now) {
            return Ok(accepted);
        }
        // Said only of a token this server would have taken the second before it expired (signed,
        // for this issuer and this resource): its holder refreshes it, which is routine. Any other
        // refusal says nothing of why.
        let expiry = claims.get("exp").and_then(Value::as_u64).filter(|&exp| exp > 0 && exp <= now);
        match expiry {
            Some(exp) if self.check_claims(&claims, exp - 1).is_some() => Err(Refusal::InvalidToken(TOKEN_EXPIRED)),
            _ => Err(INVALID),
        }
    }

    fn check_claims(&self, claims: &Value, now: u64) -> Option<(Principal, u64)> {
        if claims.get("iss")?.as_str()? != self.config.issuer {
            return None;
        }
        let audience = match claims.get("aud")? {
            Value::String(aud) => aud.as_str(),
            Value::Array(auds) if auds.len() == 1 => auds[0].as_str()?,
            _ => return None,
        };
        if !self.config.resource.matches(audience) {
            return None;
        }
        let exp = claims.get("exp")?.as_u64()?;
        if now >= exp {
            return None;
        }
        if let Some(nbf) = claims.get("nbf") {
            if nbf.as_u64()? > now + CLOCK_SKEW_SECS {
                return None;
            }
        }
        let issued = match claims.get("iat") {
            Some(iat) => iat.as_u64()?,
            None => now,
        };
        if exp.saturating_sub(issued) > self.config.max_lifetime_secs || issued > now + CLOCK_SKEW_SECS {
            return None;
        }
        let subject = subject_of(claims.get("sub"), self.config.client_credentials)?;
        let text = |name: &str| claims.get(name).and_then(Value::as_str).filter(|s| !s.chars().any(char::is_control));
        let scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(scope)), _) => scope.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            (_, Some(Value::Array(scp))) => scp.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            (_, Some(Value::String(scp))) => scp.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let client = text("client_id").or_else(|| text("azp"));
        let principal = Principal::verified(subject.as_deref(), client, scopes).expiring_at(exp);
        principal.is_verified().then_some((principal, exp))
    }

    /// What a refusal tells the client. Built from configuration only, never from request
    /// headers, and never containing the presented credential.
    pub fn challenge(&self, refusal: &Refusal) -> Challenge {
        let (status, error, description, scopes) = match refusal {
            Refusal::InvalidToken(description) => {
                (StatusCode::UNAUTHORIZED, Some("invalid_token"), *description, &self.config.route_scopes)
            }
            Refusal::InvalidRequest(description) => {
                (StatusCode::BAD_REQUEST, Some("invalid_request"), *description, &self.config.route_scopes)
            }
            Refusal::TokenRequired(scopes) => (StatusCode::UNAUTHORIZED, None, "a bearer token is required", scopes),
            Refusal::InsufficientScope(scopes) => {
                (StatusCode::FORBIDDEN, Some("insufficient_scope"), "the access token lacks a required scope", scopes)
            }
            Refusal::KeysUnavailable { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("temporarily_unavailable"),
                "the keys that verify access tokens could not be fetched; try again shortly",
                &self.config.route_scopes,
            ),
        };
        let mut parameters = Vec::with_capacity(4);
        if let Some(error) = error {
            parameters.push(format!(r#"error="{error}""#));
            parameters.push(format!(r#"error_description="{description}""#));
        }
        if !scopes.is_empty() {
            parameters.push(format!(r#"scope="{}""#, scopes.join(" ")));
        }
        parameters.push(format!(r#"resource_metadata="{}""#, self.config.resource.metadata_url()));
        let www_authenticate = format!("Bearer {}", parameters.join(", "));
        Challenge { status, error, description, www_authenticate }
    }

    /// The RFC 9728 protected-resource metadata document.
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.config.resource.url(),
            "authorization_servers": self.config.authorization_servers,
            "scopes_supported": self.config.scopes_supported,
            "bearer_methods_supported": ["header"],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ManualClock;

    /// An authenticator with no keys: no token verifies, so a success can only be a remembered one.
    fn authenticator() -> Authenticator {
        let config = AuthConfig {
            mode: AuthMode::Required,
            resource: CanonicalResource::resolve(Some("https://mcp.example.com/api/mcp")).unwrap(),
            issuer: "https://auth.example.com".into(),
            algorithms: vec![Algorithm::RS256],
            keys: None,
            max_lifetime_secs: 3600,
            route_scopes: vec![],
            authorization_servers: vec![],
            scopes_supported: vec![],
            scopes_supported_configured: false,
            client_credentials: false,
        };
        Authenticator::new(config, Arc::new(ManualClock::new(1_000_000)))
    }

    fn authorization(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn a_credentials_remaining_time_is_read_on_the_authenticators_clock() {
        let auth = authenticator(); // its clock reads 1 000 000 ms
        let alice = Principal::verified(Some("alice"), None, vec![]);
        assert_eq!(auth.credential_remaining(&alice), None, "no expiry known");
        assert_eq!(auth.credential_remaining(&Principal::anonymous()), None);
        assert_eq!(auth.credential_remaining(&alice.clone().expiring_at(1_003)), Some(Duration::from_secs(3)));
        assert_eq!(auth.credential_remaining(&alice.clone().expiring_at(999)), Some(Duration::ZERO), "expired");
        assert_eq!(
            auth.credential_remaining(&alice.expiring_at(u64::MAX)),
            Some(Duration::from_millis(u64::MAX - 1_000_000))
        );
    }

    /// A remembered token is taken from the header's bytes as the text path would take it: any
    /// case of `Bearer`, spaces and tabs around the token; anything else is not a hit.
    #[tokio::test]
    async fn a_remembered_token_is_read_from_the_header_as_the_text_path_reads_it() {
        let auth = authenticator();
        let token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLW9mLWFsaWNl";
        let alice = Principal::verified(Some("alice"), None, vec!["mcp:read".into()]);
        assert!(auth.authenticate(&authorization(&format!("Bearer {token}"))).await.is_err(), "nothing verifies here");
        auth.verified.remember(token.as_bytes(), alice.clone(), 2_000, 1_000);
        for accepted in [format!("Bearer {token}"), format!("bEaReR  \t{token} \t")] {
            assert_eq!(auth.authenticate(&authorization(&accepted)).await, Ok(alice.clone()), "{accepted}");
        }
        let refused = [
            format!("Basic {token}"),
            format!("Bearer{token}"),
            format!("Bearer {token}x"),
            format!("Bearer x{token}"),
            format!("Bearer {token} {token}"),
            token.to_owned(),
            "Bearer  ".to_owned(),
        ];
        // A Bearer value that is not visible ASCII is refused as malformed, even when it is valid
        // UTF-8 (it never reaches verification); another scheme's credentials ask for a token.
        let mut headers = HeaderMap::new();
        let value = http::HeaderValue::from_bytes("Bearer café.token".as_bytes()).unwrap();
        headers.insert(header::AUTHORIZATION, value);
        let malformed = Refusal::InvalidToken("the Authorization header must be Bearer and a token");
        assert_eq!(auth.authenticate(&headers).await, Err(malformed));
        let basic = auth.authenticate(&authorization(&format!("Basic {token}"))).await;
        assert_eq!(basic, Err(Refusal::TokenRequired(vec![])));
        for refused in refused {
            assert!(auth.authenticate(&authorization(&refused)).await.is_err(), "{refused}");
        }
    }
}
