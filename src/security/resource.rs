//! The canonical resource URL: the audience every token must name (RFC 8707) and the base of
//! the protected-resource metadata URL (RFC 9728). Pinned from configuration, never derived
//! from `Host`, `X-Forwarded-*` or `Forwarded`, which a client or proxy can forge.

use url::Url;

/// The environment variable holding the resource URL.
pub const RESOURCE_URL_ENV: &str = "MCP_RESOURCE_URL";
/// The resource URL of the local run.
pub const DEFAULT_RESOURCE_URL: &str = "http://localhost:3000/api/mcp";
/// Where the metadata document lives, relative to the resource's origin.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// A parsed, normalised resource URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanonicalResource {
    url: String,
    origin: String,
    /// Where its metadata document is: the origin's `/.well-known/oauth-protected-resource` for
    /// the configured resource, that path followed by the endpoint's path for the others.
    metadata_url: String,
}

impl CanonicalResource {
    /// Normalises `raw`: trim, parse (WHATWG), drop the fragment, strip one trailing slash; keep
    /// an explicit port and the path. Unset or blank means the local default; anything that does
    /// not parse as an http(s) URL is an error naming the variable.
    pub fn resolve(raw: Option<&str>) -> Result<Self, String> {
        let raw = raw.map(str::trim).filter(|r| !r.is_empty()).unwrap_or(DEFAULT_RESOURCE_URL);
        let mut url = Url::parse(raw).map_err(|_| format!("{RESOURCE_URL_ENV} is not a valid URL"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!("{RESOURCE_URL_ENV} must be an http or https URL with a host"));
        }
        url.set_fragment(None);
        let mut serialized = url.to_string();
        if serialized.ends_with('/') {
            serialized.pop();
        }
        let origin = url.origin().ascii_serialization();
        let metadata_url = format!("{origin}{METADATA_PATH}");
        Ok(Self { url: serialized, origin, metadata_url })
    }

    /// Another endpoint of the same deployment, `path` on this origin (e.g. `/api/examples/minimal`):
    /// its own protected resource (RFC 8707 audience), with its metadata at
    /// `/.well-known/oauth-protected-resource{path}` (RFC 9728's path-inserted form).
    pub fn endpoint(&self, path: &str) -> Self {
        Self {
            url: format!("{}{path}", self.origin),
            origin: self.origin.clone(),
            metadata_url: format!("{}{METADATA_PATH}{path}", self.origin),
        }
    }

    /// The resource URL, e.g. `https://mcp.example.com/api/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its origin, e.g. `https://mcp.example.com`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The metadata URL advertised in challenges.
    pub fn metadata_url(&self) -> String {
        self.metadata_url.clone()
    }

    /// Whether a token's audience names this resource (after the same normalisation). A blank
    /// audience names nothing: the default that stands in for an unset variable is not a token's.
    pub fn matches(&self, audience: &str) -> bool {
        !audience.trim().is_empty() && Self::resolve(Some(audience)).is_ok_and(|other| other.url == self.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_the_reference() {
        let default = CanonicalResource::resolve(None).unwrap();
        assert_eq!(default.url(), DEFAULT_RESOURCE_URL);
        assert_eq!(default.origin(), "http://localhost:3000");
        assert_eq!(CanonicalResource::resolve(Some("  ")).unwrap(), default);
        let pinned = CanonicalResource::resolve(Some(" https://mcp.example.com:8443/api/mcp/#frag ")).unwrap();
        assert_eq!(pinned.url(), "https://mcp.example.com:8443/api/mcp");
        assert_eq!(pinned.metadata_url(), "https://mcp.example.com:8443/.well-known/oauth-protected-resource");
        assert_eq!(
            CanonicalResource::resolve(Some("HTTPS://MCP.Example.com/api/mcp")).unwrap().url(),
            "https://mcp.example.com/api/mcp"
        );
        for bad in ["not a url", "ftp://x/y", "mailto:a@b"] {
            assert!(CanonicalResource::resolve(Some(bad)).unwrap_err().contains("MCP_RESOURCE_URL"), "{bad}");
        }
        assert!(pinned.matches("https://mcp.example.com:8443/api/mcp/"));
        assert!(!pinned.matches("https://other.example/api/mcp"));
        assert!(!pinned.matches("https://mcp.example.com:8443/api/mcp/extra"));
        for blank in ["", "  ", "\t"] {
            assert!(!default.matches(blank), "a blank audience does not name the default resource: {blank:?}");
        }
        assert!(default.matches(DEFAULT_RESOURCE_URL));
    }
}
