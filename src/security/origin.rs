//! The Origin allowlist, the outermost check on every MCP route.
//!
//! Browsers attach `Origin` to cross-site requests; refusing unknown ones stops DNS-rebinding
//! pages from driving a local server. Requests without `Origin` (CLIs, server-to-server) pass
//! on to authentication. Entries and the header are compared as WHATWG serialized origins, so
//! `HTTPS://App.Example/` and `https://app.example` are the same origin and
//! `https://app.example.evil` is not.
//!
//! The policy is data: [`AllowedOrigins::decide`] says whether a request's origin may proceed,
//! and the transport renders that decision (the 403, and the CORS headers of an allowed origin).

use http::{HeaderMap, HeaderValue, header};
use url::Url;

/// The environment variable holding the comma-separated allowlist.
pub const ALLOWED_ORIGINS_ENV: &str = "MCP_ALLOWED_ORIGINS";
/// The body of a refusal. It never echoes the allowlist or the offending value.
pub const FORBIDDEN_BODY: &str = "Forbidden: Origin not allowed";

/// A parsed, normalised, de-duplicated allowlist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedOrigins {
    listed: Vec<String>,
    /// Any `http(s)://localhost`, `127.0.0.1` or `[::1]` origin, whatever its port: the local
    /// run's default, so a page or tool on another local port can call it.
    any_loopback: bool,
}

/// What the Origin check decided about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginDecision<'h> {
    /// No `Origin` header: not a browser's cross-origin call; authentication decides.
    Absent,
    /// An allowed origin; the value is the header as sent, to echo in CORS headers.
    Allowed(&'h HeaderValue),
    /// Not allowed, unreadable, opaque, or sent more than once.
    Refused,
}

impl AllowedOrigins {
    /// Parses a raw allowlist: split on commas, trim, normalise each entry to its origin, drop
    /// junk and opaque origins, de-duplicate keeping the first. `None` or blank input yields the
    /// posture's default: any loopback origin locally, none when deployed. Input that is all
    /// junk yields an empty list (which refuses every Origin).
    pub fn parse(raw: Option<&str>, deployed: bool) -> Self {
        match raw.filter(|r| !r.trim().is_empty()) {
            Some(raw) => Self::from_list(raw.split(',').map(str::trim).filter(|e| !e.is_empty())),
            None if deployed => Self::from_list::<_, &str>([]),
            None => Self::loopback(),
        }
    }

    /// Every loopback origin, on any port (the local run's default).
    pub fn loopback() -> Self {
        Self { listed: Vec::new(), any_loopback: true }
    }

    /// An explicit list: each entry normalised to its origin, junk dropped, duplicates removed.
    pub fn from_list<I: IntoIterator<Item = S>, S: AsRef<str>>(list: I) -> Self {
        let mut origins: Vec<String> = Vec::new();
        for origin in list.into_iter().filter_map(|e| serialize_origin(e.as_ref())) {
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Self { listed: origins, any_loopback: false }
    }

    /// The normalised entries, in first-seen order.
    pub fn as_slice(&self) -> &[String] {
        &self.listed
    }

    /// Whether any loopback origin is allowed.
    pub fn allows_any_loopback(&self) -> bool {
        self.any_loopback
    }

    /// Whether a request carrying this `Origin` header value (if any) may proceed.
    pub fn permits(&self, origin: Option<&[u8]>) -> bool {
        let Some(raw) = origin else { return true };
        let Ok(raw) = std::str::from_utf8(raw) else { return false };
        let Ok(url) = Url::parse(raw) else { return false };
        let origin = url.origin();
        if !origin.is_tuple() {
            return false;
        }
        (self.any_loopback && is_loopback(&url)) || self.listed.contains(&origin.ascii_serialization())
    }

    /// The decision for a request's headers. Two `Origin` headers are refused rather than
    /// guessed at: a browser sends one, and checking only the first would let the second through
    /// to anything that reads the other.
    pub fn decide<'h>(&self, headers: &'h HeaderMap) -> OriginDecision<'h> {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let Some(origin) = values.next() else { return OriginDecision::Absent };
        if values.next().is_some() || !self.permits(Some(origin.as_bytes())) {
            return OriginDecision::Refused;
        }
        OriginDecision::Allowed(origin)
    }
}

/// A loopback host over http(s): `localhost`, `127.0.0.1` or `[::1]`, any port.
fn is_loopback(url: &Url) -> bool {
    use url::Host;
    matches!(url.scheme(), "http" | "https")
        && match url.host() {
            Some(Host::Domain(domain)) => domain == "localhost",
            Some(Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
            Some(Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
            None => false,
        }
}

/// `new URL(raw).origin` in WHATWG terms, or `None` for junk and opaque (`"null"`) origins.
fn serialize_origin(raw: &str) -> Option<String> {
    let url = Url::parse(raw).ok()?;
    let origin = url.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(raw: &str) -> AllowedOrigins {
        AllowedOrigins::parse(Some(raw), false)
    }

    #[test]
    fn o1_o4_o5_o6_refusals() {
        let allow = list("https://app.example");
        for bad in [
            "https://evil.example",
            "null",
            "not a url",
            "http://app.example",
            "https://app.example:8443",
            "https://app.example.evil",
            "",
        ] {
            assert!(!allow.permits(Some(bad.as_bytes())), "{bad} must be refused");
        }
        assert!(!allow.permits(Some(b"\xff\xfe")));
    }

    #[test]
    fn o2_o3_passes() {
        let allow = list("https://app.example/, HTTPS://Admin.Example:8443");
        assert!(allow.permits(None));
        assert!(allow.permits(Some(b"https://app.example")));
        assert!(allow.permits(Some(b"HTTPS://APP.example")));
        assert!(allow.permits(Some(b"https://app.example:443")));
        assert!(allow.permits(Some(b"https://admin.example:8443")));
    }

    #[test]
    fn o7_empty_allowlist_refuses_every_origin() {
        let allow = list("garbage");
        assert!(allow.as_slice().is_empty());
        assert!(!allow.permits(Some(b"http://localhost:3000")));
        assert!(allow.permits(None));
    }

    #[test]
    fn o8_defaults_only_when_unset_or_blank() {
        for blank in [None, Some(""), Some("   ")] {
            let local = AllowedOrigins::parse(blank, false);
            assert!(local.as_slice().is_empty() && local.allows_any_loopback());
            for origin in [
                "http://localhost:3000",
                "http://localhost:4012",
                "http://127.0.0.1:9",
                "https://127.0.0.1",
                "http://[::1]:8080",
                "HTTP://LOCALHOST:5173/",
            ] {
                assert!(local.permits(Some(origin.as_bytes())), "local default allows {origin}");
            }
            for origin in [
                "http://localhost.evil.example:3000",
                "http://evil.localhost:3000",
                "http://127.0.0.2:3000",
                "http://0.0.0.0:3000",
                "http://[::2]:3000",
                "file://localhost/etc/passwd",
                "ws://localhost:3000",
                "null",
            ] {
                assert!(!local.permits(Some(origin.as_bytes())), "local default refuses {origin}");
            }
            let deployed = AllowedOrigins::parse(blank, true);
            assert!(deployed.as_slice().is_empty() && !deployed.allows_any_loopback());
            assert!(!deployed.permits(Some(b"http://localhost:3000")), "deployed allows only what is configured");
            assert!(deployed.permits(None));
        }
        let configured = AllowedOrigins::parse(Some("https://app.example"), false);
        assert!(!configured.allows_any_loopback(), "a configured list replaces the loopback default");
        assert!(!configured.permits(Some(b"http://localhost:3000")));
    }

    #[test]
    fn decide_refuses_a_repeated_origin_and_echoes_the_allowed_one() {
        let allow = list("https://app.example");
        let mut headers = HeaderMap::new();
        assert_eq!(allow.decide(&headers), OriginDecision::Absent);
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://app.example"));
        assert_eq!(allow.decide(&headers), OriginDecision::Allowed(&HeaderValue::from_static("https://app.example")));
        headers.append(header::ORIGIN, HeaderValue::from_static("https://app.example"));
        assert_eq!(allow.decide(&headers), OriginDecision::Refused, "two Origin headers, even equal ones");
        let mut evil_second = HeaderMap::new();
        evil_second.append(header::ORIGIN, HeaderValue::from_static("https://app.example"));
        evil_second.append(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert_eq!(allow.decide(&evil_second), OriginDecision::Refused);
        let mut evil = HeaderMap::new();
        evil.insert(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert_eq!(allow.decide(&evil), OriginDecision::Refused);
    }

    #[test]
    fn o9_o10_o11_normalisation() {
        assert_eq!(
            list(" https://app.example/ , https://admin.example:8443/path, nope, ,").as_slice(),
            ["https://app.example", "https://admin.example:8443"]
        );
        assert_eq!(list("https://a.example,https://a.example/,HTTPS://A.EXAMPLE").as_slice(), ["https://a.example"]);
        assert!(list("garbage").as_slice().is_empty());
        assert!(list("data:text/plain").as_slice().is_empty());
        assert!(list("file:///etc/passwd").as_slice().is_empty());
    }
}
