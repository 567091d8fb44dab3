//! The Origin allowlist, the outermost check on every MCP route.
//!
//! Browsers attach `Origin` to cross-site requests; refusing unknown ones stops DNS-rebinding
//! pages from driving a local server. Requests without `Origin` (CLIs, server-to-server) pass
//! on to authentication. Entries and the header are compared as WHATWG serialized origins, so
//! `HTTPS://App.Example/` and `https://app.example` are the same origin and
//! `https://app.example.evil` is not.

use url::Url;

/// The environment variable holding the comma-separated allowlist.
pub const ALLOWED_ORIGINS_ENV: &str = "MCP_ALLOWED_ORIGINS";
/// The allowlist used when the variable is unset or blank.
pub const DEFAULT_ALLOWED_ORIGINS: [&str; 2] = ["http://localhost:3000", "http://127.0.0.1:3000"];
/// The body of a refusal. It never echoes the allowlist or the offending value.
pub const FORBIDDEN_BODY: &str = "Forbidden: Origin not allowed";

/// A parsed, normalised, de-duplicated allowlist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedOrigins(Vec<String>);

impl AllowedOrigins {
    /// Parses a raw allowlist: split on commas, trim, normalise each entry to its origin, drop
    /// junk and opaque origins, de-duplicate keeping the first. `None` or blank input yields the
    /// defaults; input that is all junk yields an empty list (which refuses every Origin).
    pub fn parse(raw: Option<&str>) -> Self {
        let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
            return Self(DEFAULT_ALLOWED_ORIGINS.iter().map(|s| s.to_string()).collect());
        };
        Self::from_list(raw.split(',').map(str::trim).filter(|e| !e.is_empty()))
    }

    /// Reads [`ALLOWED_ORIGINS_ENV`].
    pub fn from_env() -> Self {
        Self::parse(std::env::var(ALLOWED_ORIGINS_ENV).ok().as_deref())
    }

    /// An explicit list: each entry normalised to its origin, junk dropped, duplicates removed.
    pub fn from_list<I: IntoIterator<Item = S>, S: AsRef<str>>(list: I) -> Self {
        let mut origins: Vec<String> = Vec::new();
        for origin in list.into_iter().filter_map(|e| serialize_origin(e.as_ref())) {
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Self(origins)
    }

    /// The normalised entries, in first-seen order.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// Whether a request carrying this `Origin` header value (if any) may proceed.
    pub fn permits(&self, origin: Option<&[u8]>) -> bool {
        let Some(raw) = origin else { return true };
        let Ok(raw) = std::str::from_utf8(raw) else { return false };
        match serialize_origin(raw) {
            Some(origin) => self.0.contains(&origin),
            None => false,
        }
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
        AllowedOrigins::parse(Some(raw))
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
        let defaults: Vec<String> = DEFAULT_ALLOWED_ORIGINS.iter().map(|s| s.to_string()).collect();
        assert_eq!(AllowedOrigins::parse(None).as_slice(), defaults.as_slice());
        assert_eq!(AllowedOrigins::parse(Some("")).as_slice(), defaults.as_slice());
        assert_eq!(AllowedOrigins::parse(Some("   ")).as_slice(), defaults.as_slice());
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
