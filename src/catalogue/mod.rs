//! The tool catalogue: one module per reference example, each registering into a server.
//!
//! `/api/mcp` serves the combined catalogue; every module exposes `register` so a route that
//! serves one example alone composes the same code.

pub mod async_jobs;
pub mod auth_server;
pub mod least_privilege;
pub mod minimal;

use std::sync::Arc;

use crate::jobs::Jobs;
use crate::{Config, McpServer};

/// The job service built from a configuration's store, queue, sealer, clock and randomness.
pub fn jobs_from(config: &Config) -> Arc<Jobs> {
    Arc::new(
        Jobs::new(
            config.jobs.store.clone(),
            config.jobs.publisher.clone(),
            config.sealer.clone(),
            config.clock.clone(),
            config.random.clone(),
        )
        .with_logger(config.logger())
        .with_limits(config.job_limits),
    )
}

/// The tasks extension service over a configuration's task store.
pub fn tasks_from(config: &Config) -> Arc<crate::tasks::TaskService> {
    Arc::new(crate::tasks::TaskService::new(
        config.jobs.task_store.clone(),
        config.clock.clone(),
        config.random.clone(),
        config.bus.clone(),
    ))
}

/// Registers the combined catalogue of `/api/mcp`.
pub fn register_all(server: &mut McpServer, config: &Config) {
    server.enable_tasks(tasks_from(config));
    minimal::register(server);
    auth_server::register(server);
    least_privilege::register(server, Arc::new(least_privilege::DiscardLedger));
    async_jobs::register(server, jobs_from(config));
}
