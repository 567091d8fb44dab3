//! The tool catalogue: one module per reference example, each registering into a server.
//!
//! Every module exposes `register`: `/api/mcp` serves the ones `compose::configure_server` lists
//! (a small default; each other one is a line there to uncomment), and each example is also
//! served alone at `/api/examples/<name>` (see [`EXAMPLES`]) from the same code.

pub mod async_jobs;
pub mod auth_server;
mod backends;
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

pub use backends::{Backends, ExampleSettings, Services};

use std::sync::Arc;

use serde_json::{Value, json};

use crate::protocol::types::InputRequest;
use crate::server::McpServer;
use crate::server::{InputRequired, Outcome, RequestContext, ToolError};
use crate::store::{StoreError, StoreErrorKind};

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
/// [`solicited_answer`]. A client that did not declare what the question needs (in the mode the
/// question takes: a form question needs form elicitation, not only URL) is never asked: the
/// call ends in a tool error naming the capability, the seed examples' documented outcome, on
/// both protocol paths.
pub fn ask<T>(ctx: &RequestContext, key: &str, request: InputRequest) -> Result<Outcome<T>, ToolError> {
    let (needed, granted) = request.capability(ctx.client_capabilities());
    if !granted {
        // The fragment's one top-level member: `elicitation`, `sampling` or `roots`.
        let name = needed.as_object().and_then(|needed| needed.keys().next()).map_or("required", String::as_str);
        return Err(ToolError::Execution(format!("the client did not declare the {name} capability")));
    }
    Ok(Outcome::InputRequired(InputRequired::new().request(key, request).state(json!({ "asked": key }))))
}

/// Whether `text` is 1 to `max` characters without ASCII control characters: the rule several
/// examples' schemas state, which their handlers check again as defence in depth (a handler
/// must not trust that the schema ran, and it rejects rather than truncates).
pub(crate) fn is_plain_text_within(text: &str, max: usize) -> bool {
    (1..=max).contains(&text.chars().count()) && !text.chars().any(|c| c.is_ascii_control())
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

/// One reference example served alone at `/api/examples/<name>`.
pub struct Example {
    /// The route segment, e.g. `minimal`.
    pub name: &'static str,
    /// The `serverInfo.name` the example reports.
    pub server_name: &'static str,
    /// Registers its tools over the process's services.
    pub register: fn(&mut McpServer, &Services),
}

/// Every example built so far; each is served alone at `/api/examples/<name>`.
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
        register: |server, services| query_command::register(server, services.items.clone(), services.logger.clone()),
    },
    Example {
        name: "secure-tools",
        server_name: "secure-tools-server",
        register: |server, services| secure_tools::register(server, services.names.clone(), services.logger.clone()),
    },
    Example {
        name: "facade",
        server_name: "facade-server",
        register: |server, services| facade::register(server, services.facade()),
    },
    Example {
        name: "auth-server",
        server_name: "auth-server",
        register: |server, services| auth_server::register(server, services.logger.clone()),
    },
    Example {
        name: "least-privilege",
        server_name: "least-privilege-server",
        register: |server, _| least_privilege::register(server, Arc::new(least_privilege::DiscardLedger)),
    },
    Example {
        name: "async-jobs",
        server_name: "async-jobs-server",
        register: |server, services| async_jobs::register(server, services.jobs.clone()),
    },
    Example {
        name: "db-adapter",
        server_name: db_adapter::SERVER_NAME,
        register: |server, services| db_adapter::register(server, services.db_adapter()),
    },
    Example {
        name: "sandbox-isolation",
        server_name: sandbox_isolation::SERVER_NAME,
        register: |server, services| {
            sandbox_isolation::register(
                server,
                services.sandbox.clone(),
                services.sandbox_runs.clone(),
                services.logger.clone(),
            )
        },
    },
];

/// The example named `name`, if it is served.
pub fn example(name: &str) -> Option<&'static Example> {
    EXAMPLES.iter().find(|e| e.name == name)
}

/// Registers every example on one server, plus the tasks extension: what the tests that cover
/// the whole catalogue at once serve (`/api/mcp` serves what `compose::configure_server` lists).
pub fn register_all(server: &mut McpServer, services: &Services) {
    server.enable_tasks(services.tasks.clone());
    for example in EXAMPLES {
        (example.register)(server, services);
    }
}
