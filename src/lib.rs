//! Serve the Model Context Protocol (revision 2026-07-28, the stateless revision) from
//! Vercel's Rust runtime, with a stateless 2025-11-25 fallback for older clients.
//!
//! The modules, bottom to top (a module uses only those on its own layer or below; see
//! `ARCHITECTURE.md`, enforced by `tests/it/layers.rs`):
//!
//! - [`protocol`]: the wire vocabulary (JSON-RPC, MCP types, errors, `_meta`).
//! - [`outbound`], [`telemetry`]: outbound HTTPS; OpenTelemetry traces over OTLP.
//! - [`body`], [`state`], [`store`]: response bodies and stream events; sealed envelopes, the
//!   clock, randomness, nonces and the change bus; the storage vocabulary and the shared Redis.
//! - [`observe`]: structured logs, keyed digests, the panic hook.
//! - [`security`]: Origin, bearer tokens, the principal, the platform's identity.
//! - [`handler`]: the handler contract (`RequestContext`, `Outcome`, `ToolError`).
//! - [`tasks`]: the tasks extension.
//! - [`server`]: the registry and dispatch.
//! - [`transport`]: the Streamable HTTP pipeline (`App`, `handle`).
//! - [`jobs`], [`client`]: async jobs behind a queue; the MCP client and orchestrator host.
//! - [`catalogue`]: the reference examples, each owning its backends.
//! - [`settings`], [`compose`], [`testing`]: the environment parsed; the composition root; an
//!   in-process client for tests of one's own tools.
//! - [`vercel`], [`local`]: the edges that put the apps on a socket.

pub mod body;
pub mod catalogue;
pub mod client;
pub mod compose;
pub mod handler;
pub mod jobs;
pub mod local;
pub mod observe;
pub mod outbound;
pub mod protocol;
pub mod security;
pub mod server;
pub mod settings;
pub mod state;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod testing;
pub mod transport;
pub mod vercel;

pub use compose::{Parts, VERSION, configure_server, consumer, example_app, mcp_app, parts_or_exit, sweep};
pub use server::McpServer;
pub use settings::Settings;
pub use transport::App;

/// `docs/guide.md`, whose snippets `cargo test --doc` compiles and runs.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
pub struct Guide;
