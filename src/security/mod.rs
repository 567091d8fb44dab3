//! Who may talk to the server: the Origin allowlist (DNS-rebinding defence) and the principal
//! model every handler receives.

pub mod origin;
pub mod principal;

pub use origin::AllowedOrigins;
pub use principal::Principal;
