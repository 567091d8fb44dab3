//! Who may talk to the server: the Origin allowlist (DNS-rebinding defence), bearer-token
//! authentication against a pinned resource URL, and the principal model every handler receives.

pub mod auth;
mod constant_time;
pub mod jwks;
pub mod origin;
pub mod platform;
pub mod principal;
pub mod resource;
mod verified;

pub use auth::{AuthConfig, AuthMode, Authenticator, Challenge, Refusal};
pub use constant_time::constant_time_eq;
pub use origin::{AllowedOrigins, OriginDecision};
pub use platform::PlatformIdentity;
pub use principal::Principal;
pub use resource::CanonicalResource;
