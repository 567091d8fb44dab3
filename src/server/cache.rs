//! Cache hints: how long, and for whom, a list or read result may be reused.

/// How long and for whom a cacheable result may be reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheHint {
    /// Freshness in milliseconds; 0 means immediately stale.
    pub ttl_ms: u64,
    /// Whether shared caches may reuse it.
    pub scope: CacheScope,
}

impl Default for CacheHint {
    /// `0` / `"private"`: the conservative default when nothing is configured.
    fn default() -> Self {
        Self { ttl_ms: 0, scope: CacheScope::Private }
    }
}

/// `cacheScope` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheScope {
    /// Any cache may reuse the result.
    Public,
    /// Only the requesting principal's cache may reuse it.
    Private,
}

impl CacheScope {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }
}

/// The six results that carry cache hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheableMethod {
    /// `server/discover`.
    Discover,
    /// `tools/list`.
    ToolsList,
    /// `prompts/list`.
    PromptsList,
    /// `resources/list`.
    ResourcesList,
    /// `resources/templates/list`.
    ResourceTemplatesList,
    /// `resources/read` (overridable per resource).
    ResourcesRead,
}
