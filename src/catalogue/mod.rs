//! The tool catalogue: one module per reference example, each registering into a server.
//!
//! `/api/mcp` serves the combined catalogue; every module exposes `register` so a route that
//! serves one example alone (`/api/examples/<name>`, see [`EXAMPLES`]) composes the same code.

pub mod async_jobs;
pub mod auth_server;
pub mod db_adapter;
pub mod elicitation;
pub mod facade;
pub mod least_privilege;
pub mod minimal;
pub mod query_command;
pub mod resources;
pub mod sampling;
pub mod sandbox_isolation;
pub mod secure_tools;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::config::Config;
use crate::jobs::Jobs;
use crate::jobs::store::{StoreError, StoreErrorKind};
use crate::protocol::types::InputRequest;
use crate::server::McpServer;
use crate::server::{InputRequired, Outcome, RequestContext, ToolError};

/// The scope the catalogue's read tools require when authentication is on.
pub const READ_SCOPE: &str = "mcp:read";
/// The scope the catalogue's write tools require when authentication is on.
pub const WRITE_SCOPE: &str = "mcp:write";

/// The answer to the question asked under `key`, if this retry carries both the answer and
/// the sealed state of [`ask`]. An answer without that state was never asked for, so it is
/// ignored and the handler asks again.
pub fn solicited_answer<'a>(ctx: &'a RequestContext, key: &str) -> Option<&'a Value> {
    let asked = ctx.request_state().and_then(|state| state.get("asked")).and_then(Value::as_str) == Some(key);
    ctx.input_response(key).filter(|_| asked)
}

/// Asks the client one question under `key`; the retry's answer is read with
/// [`solicited_answer`]. A client that did not declare `capability` is never asked: the call
/// ends in a tool error naming it, which is the seed examples' documented outcome.
pub fn ask<T>(
    ctx: &RequestContext,
    capability: &str,
    key: &str,
    request: InputRequest,
) -> Result<Outcome<T>, ToolError> {
    if !ctx.has_capability(capability) {
        return Err(ToolError::Execution(format!("the client did not declare the {capability} capability")));
    }
    Ok(Outcome::InputRequired(InputRequired::new().request(key, request).state(json!({ "asked": key }))))
}

/// The facade example over the configuration's logger and randomness.
pub fn facade_from(config: &Config) -> Arc<facade::Facade> {
    let lines = Arc::new(facade::LogLines(config.logger()));
    Arc::new(facade::Facade::new(lines.clone(), lines, config.random.clone()))
}

/// The db-adapter example over the configuration's product backend, logging reads as log lines.
pub fn db_adapter_from(config: &Config) -> Arc<db_adapter::DbAdapter> {
    Arc::new(db_adapter::DbAdapter::new(config.products.clone(), Arc::new(db_adapter::LoggedQueries(config.logger()))))
}

/// The error code the capped example stores' Lua scripts raise when the cap is reached.
pub(crate) const STORE_FULL_CODE: &str = "STORE_FULL";

/// Maps a capped example store's Redis error: the cap's own error code becomes `full`, anything
/// else an outage naming `what` (never the server's message, which may carry key names).
pub(crate) fn capped_store_error(error: &redis::RedisError, full: fn() -> StoreError, what: &str) -> StoreError {
    if error.code() == Some(STORE_FULL_CODE) {
        full()
    } else {
        StoreError::fault(format!("{what} unavailable: {:?}", error.kind()))
    }
}

/// How a capped example store's error reaches the caller: a full store is an expected answer and
/// goes out as it is; anything else is an outage, reported with a correlation id that its
/// `store.fault` line shares (operation and detail stay in the log).
pub(crate) fn store_tool_error<'a>(
    logger: &'a crate::observe::Logger,
    operation: &'a str,
) -> impl FnOnce(StoreError) -> ToolError + 'a {
    move |error| match error.kind() {
        StoreErrorKind::Full => ToolError::Execution(error.message().to_owned()),
        StoreErrorKind::Fault | StoreErrorKind::Contention => {
            ToolError::Execution(logger.fault("store.fault", operation, error.message()))
        }
    }
}

/// The store error of an example store deployed without `REDIS_URL`.
pub(crate) fn redis_url_unset(what: &str) -> StoreError {
    StoreError::fault(format!("REDIS_URL is not set: {what} need a shared store (Redis) when deployed"))
}

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
    Arc::new(
        crate::tasks::TaskService::new(
            config.jobs.task_store.clone(),
            config.clock.clone(),
            config.random.clone(),
            config.bus.clone(),
        )
        .with_logger(config.logger()),
    )
}

/// One reference example served alone at `/api/examples/<name>`.
pub struct Example {
    /// The route segment, e.g. `minimal`.
    pub name: &'static str,
    /// The `serverInfo.name` the example reports.
    pub server_name: &'static str,
    /// Registers its tools.
    pub register: fn(&mut McpServer, &Config),
}

/// Every example built so far, in the order `/api/mcp` lists their tools; each is also served
/// alone at `/api/examples/<name>`.
pub const EXAMPLES: &[Example] = &[
    Example { name: "minimal", server_name: "minimal-server", register: |server, _| minimal::register(server) },
    Example { name: "resources", server_name: "resources-server", register: |server, _| resources::register(server) },
    Example {
        name: "elicitation",
        server_name: "elicitation-server",
        register: |server, _| elicitation::register(server, Arc::new(elicitation::NoCalendar)),
    },
    Example { name: "sampling", server_name: "sampling-server", register: |server, _| sampling::register(server) },
    Example {
        name: "query-command",
        server_name: "query-command-server",
        register: |server, config| query_command::register(server, config.jobs.item_store.clone(), config.logger()),
    },
    Example {
        name: "secure-tools",
        server_name: "secure-tools-server",
        register: |server, config| secure_tools::register(server, config.jobs.name_list.clone(), config.logger()),
    },
    Example {
        name: "facade",
        server_name: "facade-server",
        register: |server, config| facade::register(server, facade_from(config)),
    },
    Example {
        name: "auth-server",
        server_name: "auth-server",
        register: |server, config| auth_server::register(server, config.logger()),
    },
    Example {
        name: "least-privilege",
        server_name: "least-privilege-server",
        register: |server, _| least_privilege::register(server, Arc::new(least_privilege::DiscardLedger)),
    },
    Example {
        name: "async-jobs",
        server_name: "async-jobs-server",
        register: |server, config| async_jobs::register(server, jobs_from(config)),
    },
    Example {
        name: "db-adapter",
        server_name: db_adapter::SERVER_NAME,
        register: |server, config| db_adapter::register(server, db_adapter_from(config)),
    },
    Example {
        name: "sandbox-isolation",
        server_name: sandbox_isolation::SERVER_NAME,
        register: |server, config| sandbox_isolation::register(server, config.sandbox.clone(), config.logger()),
    },
];

/// The example named `name`, if it is served.
pub fn example(name: &str) -> Option<&'static Example> {
    EXAMPLES.iter().find(|e| e.name == name)
}

/// Registers the combined catalogue of `/api/mcp`: every example, plus the tasks extension.
pub fn register_all(server: &mut McpServer, config: &Config) {
    server.enable_tasks(tasks_from(config));
    for example in EXAMPLES {
        (example.register)(server, config);
    }
}
