//! Who may talk to the server: the Origin allowlist (DNS-rebinding defence), bearer-token
//! authentication against a pinned resource URL, the principal model every handler receives, and
//! each principal's share of what an instance holds open or waits for.

pub mod auth;
mod constant_time;
pub mod jwks;
pub mod origin;
pub mod platform;
pub mod principal;
pub mod resource;
pub mod slots;
pub mod turns;
mod verified;

pub use auth::{AuthConfig, AuthMode, Authenticator, Challenge, Refusal};
pub use constant_time::constant_time_eq;
pub use origin::{AllowedOrigins, OriginDecision};
pub use platform::PlatformIdentity;
pub use principal::Principal;
pub use resource::CanonicalResource;
pub use slots::{Slot, SlotCaps, Slots, SlotsFull};
pub use turns::{Turn, Turns};
