//! The tool catalogue: one module per reference example, each registering into a server.
//!
//! `/api/mcp` serves the combined catalogue; every module exposes `register` so a route that
//! serves one example alone composes the same code.

pub mod minimal;

use crate::{Config, McpServer};

/// Registers the combined catalogue of `/api/mcp`.
pub fn register_all(server: &mut McpServer, _config: &Config) {
    minimal::register(server);
}
