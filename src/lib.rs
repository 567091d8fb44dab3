//! Serve the Model Context Protocol (revision 2026-07-28, the stateless revision) from
//! Vercel's Rust runtime, with a stateless 2025-11-25 fallback for older clients.
//!
//! The crate is organised by concern (see `ARCHITECTURE.md`):
//! [`protocol`] is the wire vocabulary, [`transport`] the HTTP pipeline, [`server`] the
//! registry and dispatch, [`security`] origin and principal, [`state`] sealed envelopes and
//! change signals, [`catalogue`] the tools this deployment offers, and [`vercel`] / [`local`]
//! the two edges that put it on a socket.

pub mod body;
pub mod catalogue;
pub mod client;
pub mod config;
pub mod handler;
pub mod jobs;
pub mod local;
pub mod observe;
pub mod outbound;
pub mod protocol;
pub mod security;
pub mod server;
pub mod state;
pub mod tasks;
pub mod transport;
pub mod vercel;

pub use config::Config;
pub use server::McpServer;
pub use transport::App;

use std::sync::Arc;

/// This crate's version, reported in `serverInfo`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Registers everything `/api/mcp` offers. The one place the deployment is composed.
pub fn configure_server(server: &mut McpServer, config: &Config) {
    catalogue::register_all(server, config);
}

/// Builds the `/api/mcp` application from configuration.
pub fn mcp_app(config: &Config) -> Arc<App> {
    let mut server = McpServer::new(config.server_name.clone(), VERSION);
    configure_server(&mut server, config);
    Arc::new(App::new(server, config))
}

/// Builds the app of one example route (`/api/examples/<name>`), or `None` for an unknown name.
/// Each example is its own protected resource: tokens must name its URL (the configured origin
/// plus its path) as their audience, and its metadata is at
/// `/.well-known/oauth-protected-resource/api/examples/<name>`.
pub fn example_app(name: &str, config: &Config) -> Option<Arc<App>> {
    let example = catalogue::example(name)?;
    let mut server = McpServer::new(example.server_name, VERSION);
    (example.register)(&mut server, config);
    let scopes = config
        .example_route_scopes
        .get(example.name)
        .cloned()
        .unwrap_or_else(|| config.auth.config().route_scopes.clone());
    let auth = config.auth.for_endpoint(&format!("/api/examples/{}", example.name), scopes);
    let mut app = App::with_authenticator(server, config, &auth);
    // The examples share `api/examples.rs`, whose maxDuration is shorter than /api/mcp's.
    app.listen.max_duration = config::listen_limit_for("api/examples.rs", config.listen_max_duration);
    Some(Arc::new(app))
}

/// The queue consumer of `/api/queues/process-job`.
pub fn consumer_from(config: &Config) -> jobs::Consumer {
    jobs::Consumer {
        store: config.jobs.store.clone(),
        queue: config.jobs.queue_api.clone(),
        clock: config.clock.clone(),
        step_delay: config.job_step_delay,
        budget: config.consumer_budget,
        logger: Some(config.logger()),
    }
}

/// The cron sweep of `/api/cron/sweep-jobs`.
pub fn sweep_from(config: &Config) -> jobs::Sweep {
    jobs::Sweep { store: config.jobs.store.clone(), clock: config.clock.clone(), secret: config.cron_secret.clone() }
}

/// Reads the environment or exits with a message naming every problem. Used by the binaries.
pub fn config_or_exit() -> Config {
    match Config::from_env() {
        Ok(config) => {
            eprintln!("{:?}", config.jobs);
            eprintln!("db-adapter: {}", config.products.describe());
            if config.ephemeral_secret {
                eprintln!(
                    "warning: MCP_STATE_SECRET is not set; using an ephemeral sealing key. requestState and session ids \
                     will not survive a restart or be accepted by another process. Set MCP_STATE_SECRET for anything shared."
                );
            }
            config
        }
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(2);
        }
    }
}
