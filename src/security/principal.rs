//! The one principal model of the library.
//!
//! A principal is derived only from verified credentials (subject, then client id, then
//! anonymous). It travels explicitly in each request's context; it is never read from a tool
//! argument and never kept in module scope.

use std::sync::{Arc, LazyLock};

/// The caller of one request, as established by authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    id: Arc<str>,
    scopes: Arc<[String]>,
    verified: bool,
    client_id: Option<Arc<str>>,
}

impl Principal {
    /// The unauthenticated caller.
    pub fn anonymous() -> Self {
        // Shared: every unauthenticated request gets one, and building it allocated twice.
        static ANONYMOUS: LazyLock<Principal> = LazyLock::new(|| Principal {
            id: Arc::from("anonymous"),
            scopes: Arc::from([]),
            verified: false,
            client_id: None,
        });
        ANONYMOUS.clone()
    }

    /// A verified caller: `subject` wins over `client_id`.
    pub fn verified(subject: Option<&str>, client_id: Option<&str>, scopes: Vec<String>) -> Self {
        let id = match (subject.filter(|s| !s.is_empty()), client_id.filter(|s| !s.is_empty())) {
            (Some(sub), _) => format!("sub:{sub}"),
            (None, Some(client)) => format!("client:{client}"),
            (None, None) => return Self::anonymous(),
        };
        Self {
            id: Arc::from(id),
            scopes: scopes.into(),
            verified: true,
            client_id: client_id.filter(|c| !c.is_empty()).map(Arc::from),
        }
    }

    /// A principal rebuilt from a stored id (background work acting for its owner).
    pub fn restore(id: &str, verified: bool, scopes: Vec<String>) -> Self {
        Self { id: Arc::from(id), scopes: scopes.into(), verified, client_id: None }
    }

    /// The OAuth client the token was issued to, if the token said.
    pub fn client_id(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    /// A stable identifier, used for binding sealed state and keying stores. Not for logs.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the identity came from a verified credential.
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    /// The granted scopes.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Whether every scope in `required` was granted.
    pub fn has_scopes(&self, required: &[&str]) -> bool {
        required.iter().all(|r| self.scopes.iter().any(|s| s == r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_requirement_passes_and_an_empty_grant_fails() {
        let granted = Principal::verified(Some("a"), None, vec!["mcp:read".into()]);
        assert!(granted.has_scopes(&[]));
        assert!(granted.has_scopes(&["mcp:read"]) && !granted.has_scopes(&["mcp:read", "mcp:write"]));
        assert!(!Principal::verified(Some("a"), None, vec![]).has_scopes(&["mcp:read"]));
        assert!(Principal::verified(Some("a"), None, vec![]).has_scopes(&[]));
    }

    #[test]
    fn subject_then_client_then_anonymous() {
        assert_eq!(Principal::verified(Some("u1"), Some("c1"), vec![]).id(), "sub:u1");
        assert_eq!(Principal::verified(None, Some("c1"), vec![]).id(), "client:c1");
        assert_eq!(Principal::verified(Some(""), None, vec![]), Principal::anonymous());
        assert!(!Principal::anonymous().is_verified());
        let p = Principal::verified(Some("u"), None, vec!["a".into(), "b".into()]);
        assert!(p.has_scopes(&["a", "b"]) && !p.has_scopes(&["c"]));
    }
}
