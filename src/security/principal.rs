//! The one principal model of the library.
//!
//! A principal is derived only from verified credentials (subject, then client id, then
//! anonymous). It travels explicitly in each request's context; it is never read from a tool
//! argument and never kept in module scope.

use std::sync::Arc;

use crate::observe::ANONYMOUS_ID;

/// The longest id a principal can have: a token's subject or client id can be no longer than the
/// token ([`super::auth::MAX_TOKEN_BYTES`]), and the id adds its prefix (`client:` the longer).
/// What carries an owner's id (a job's queue message) accepts any id up to this.
pub const MAX_ID_BYTES: usize = super::auth::MAX_TOKEN_BYTES + "client:".len();

/// The caller of one request, as established by authentication.
///
/// Cheap to clone, and the unauthenticated caller costs no reference count at all: a request
/// clones its principal several times, and a count shared by every request would move between
/// the cores on each clone.
#[derive(Clone, Debug)]
pub struct Principal(Caller);

#[derive(Clone, Debug)]
enum Caller {
    Anonymous,
    Known(Arc<Known>),
}

#[derive(Clone, Debug)]
struct Known {
    id: Box<str>,
    scopes: Box<[String]>,
    verified: bool,
    client_id: Option<Box<str>>,
    /// When the credential that established it expires (seconds since the epoch).
    expires_at: Option<u64>,
}

/// Equal when the identity and its grants are (a principal restored as `anonymous` with no
/// scopes is the anonymous one). When its credential expires is not part of who the caller is.
impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        (self.id(), self.scopes(), self.is_verified(), self.client_id())
            == (other.id(), other.scopes(), other.is_verified(), other.client_id())
    }
}

impl Eq for Principal {}

impl Principal {
    /// The unauthenticated caller.
    pub fn anonymous() -> Self {
        Self(Caller::Anonymous)
    }

    /// A verified caller: `subject` wins over `client_id`.
    pub fn verified(subject: Option<&str>, client_id: Option<&str>, scopes: Vec<String>) -> Self {
        let id = match (subject.filter(|s| !s.is_empty()), client_id.filter(|s| !s.is_empty())) {
            (Some(sub), _) => format!("sub:{sub}"),
            (None, Some(client)) => format!("client:{client}"),
            (None, None) => return Self::anonymous(),
        };
        Self(Caller::Known(Arc::new(Known {
            id: id.into(),
            scopes: scopes.into(),
            verified: true,
            client_id: client_id.filter(|c| !c.is_empty()).map(Box::from),
            expires_at: None,
        })))
    }

    /// This principal, established by a credential that expires at `exp` (seconds since the
    /// epoch): what it opens that lasts (a listen stream) ends by then. The anonymous caller has
    /// no credential and stays as it is.
    pub fn expiring_at(self, exp: u64) -> Self {
        match self.0 {
            Caller::Anonymous => self,
            Caller::Known(known) => {
                let mut known = Arc::unwrap_or_clone(known);
                known.expires_at = Some(exp);
                Self(Caller::Known(Arc::new(known)))
            }
        }
    }

    /// When the credential that established this principal expires (seconds since the epoch),
    /// if it said.
    pub fn expires_at(&self) -> Option<u64> {
        match &self.0 {
            Caller::Anonymous => None,
            Caller::Known(known) => known.expires_at,
        }
    }

    /// A principal rebuilt from a stored id (background work acting for its owner).
    pub fn restore(id: &str, verified: bool, scopes: Vec<String>) -> Self {
        Self(Caller::Known(Arc::new(Known {
            id: id.into(),
            scopes: scopes.into(),
            verified,
            client_id: None,
            expires_at: None,
        })))
    }

    /// The OAuth client the token was issued to, if the token said.
    pub fn client_id(&self) -> Option<&str> {
        match &self.0 {
            Caller::Anonymous => None,
            Caller::Known(known) => known.client_id.as_deref(),
        }
    }

    /// A stable identifier, used for binding sealed state and keying stores. Not for logs.
    pub fn id(&self) -> &str {
        match &self.0 {
            Caller::Anonymous => ANONYMOUS_ID,
            Caller::Known(known) => &known.id,
        }
    }

    /// Whether the identity came from a verified credential.
    pub fn is_verified(&self) -> bool {
        match &self.0 {
            Caller::Anonymous => false,
            Caller::Known(known) => known.verified,
        }
    }

    /// The granted scopes.
    pub fn scopes(&self) -> &[String] {
        match &self.0 {
            Caller::Anonymous => &[],
            Caller::Known(known) => &known.scopes,
        }
    }

    /// Whether every scope in `required` was granted.
    pub fn has_scopes<S: AsRef<str>>(&self, required: &[S]) -> bool {
        required.iter().all(|r| self.scopes().iter().any(|s| s == r.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_requirement_passes_and_an_empty_grant_fails() {
        let granted = Principal::verified(Some("a"), None, vec!["mcp:read".into()]);
        assert!(granted.has_scopes::<&str>(&[]));
        assert!(granted.has_scopes(&["mcp:read"]) && !granted.has_scopes(&["mcp:read", "mcp:write"]));
        assert!(!Principal::verified(Some("a"), None, vec![]).has_scopes(&["mcp:read"]));
        assert!(Principal::verified(Some("a"), None, vec![]).has_scopes::<&str>(&[]));
    }

    #[test]
    fn subject_then_client_then_anonymous() {
        assert_eq!(Principal::verified(Some("u1"), Some("c1"), vec![]).id(), "sub:u1");
        assert_eq!(Principal::verified(None, Some("c1"), vec![]).id(), "client:c1");
        assert_eq!(Principal::verified(Some(""), None, vec![]), Principal::anonymous());
        assert!(!Principal::anonymous().is_verified());
        assert_eq!(Principal::anonymous().id(), "anonymous");
        assert_eq!(Principal::restore("anonymous", false, vec![]), Principal::anonymous());
        assert_ne!(Principal::restore("anonymous", true, vec![]), Principal::anonymous());
        let p = Principal::verified(Some("u"), None, vec!["a".into(), "b".into()]);
        assert!(p.has_scopes(&["a", "b"]) && !p.has_scopes(&["c"]));
    }

    #[test]
    fn a_credential_expiry_travels_with_the_principal_but_is_not_its_identity() {
        let p = Principal::verified(Some("u"), Some("c"), vec!["a".into()]);
        assert_eq!(p.expires_at(), None);
        let expiring = p.clone().expiring_at(1_800_000_000);
        assert_eq!(expiring.expires_at(), Some(1_800_000_000));
        assert_eq!(
            (expiring.id(), expiring.client_id(), expiring.scopes()),
            ("sub:u", Some("c"), &["a".to_owned()][..])
        );
        assert_eq!(expiring, p, "the same caller");
        assert_eq!(p.expires_at(), None, "the original is left as it was");
        assert_eq!(Principal::anonymous().expiring_at(1).expires_at(), None, "no credential, no expiry");
    }
}
