//! What the examples are built from: their own settings, the backends each builds from them, and
//! the process's services every registration receives.
//!
//! Each example owns its backends: the query-command items and secure-tools names live where
//! shared records live ([`Shared`]), the db-adapter products in PostgreSQL or the compiled-in
//! fixture, the sandbox behind the Vercel Sandbox API. The composition root builds them once per
//! process, so every route of a process shares them.

use std::sync::Arc;

use super::db_adapter::{self, DbAdapter, ProductBackend};
use super::facade::{self, Facade};
use super::sandbox_isolation::{RunCounter, SandboxClient, vercel::VercelSandbox};
use super::{least_privilege, query_command, secure_tools};
use crate::jobs::Jobs;
use crate::observe::Logger;
use crate::state::Random;
use crate::store::Shared;
use crate::tasks::TaskService;

/// The examples' environment variables, parsed.
#[derive(Clone, Default)]
pub struct ExampleSettings {
    /// `DATABASE_URL`: the db-adapter's PostgreSQL; unset, the read-only fixture.
    pub database_url: Option<String>,
    /// `MCP_SANDBOX_API_BASE_URL`: a stand-in for the Vercel Sandbox API (tests).
    pub sandbox_api_base_url: Option<String>,
    /// `VERCEL_OIDC_TOKEN`: the local run's Sandbox credential (deployed, each request brings
    /// its own).
    pub sandbox_oidc_token: Option<String>,
}

impl std::fmt::Debug for ExampleSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The database URL and the token are credentials.
        f.debug_struct("ExampleSettings")
            .field("database_url_set", &self.database_url.is_some())
            .field("sandbox_api_base_url", &self.sandbox_api_base_url)
            .finish_non_exhaustive()
    }
}

impl ExampleSettings {
    /// Reads the examples' variables through `var` (unset and blank are the same), and checks
    /// the least-privilege example's grant (`LP_GRANTED_SCOPES`) against its tools.
    pub fn from_lookup(var: &dyn Fn(&str) -> Option<String>) -> Result<Self, Vec<String>> {
        let granted = var(least_privilege::GRANTED_SCOPES_ENV)
            .map(|raw| least_privilege::parse_scopes(&raw))
            .unwrap_or_else(least_privilege::required_union);
        least_privilege::validate_config(
            &granted,
            &least_privilege::required_union(),
            &least_privilege::registered_tool_names(),
        )
        .map_err(|problem| vec![problem])?;
        Ok(Self {
            database_url: var("DATABASE_URL"),
            sandbox_api_base_url: var("MCP_SANDBOX_API_BASE_URL"),
            sandbox_oidc_token: var("VERCEL_OIDC_TOKEN"),
        })
    }
}

/// The examples' stores and clients, built once per process.
#[derive(Clone)]
pub struct Backends {
    /// The query-command example's items.
    pub items: Arc<dyn query_command::ItemStore>,
    /// The secure-tools example's names.
    pub names: Arc<dyn secure_tools::NameList>,
    /// The db-adapter example's products.
    pub products: Arc<dyn ProductBackend>,
    /// The sandbox-isolation example's Vercel Sandbox client.
    pub sandbox: Arc<dyn SandboxClient>,
    /// Where the sandbox-isolation example counts each caller's runs.
    pub sandbox_runs: RunCounter,
}

impl Backends {
    /// Builds each example's backend from its settings, where shared records live, and the
    /// process's randomness (for identifiers). A bad `DATABASE_URL` is a start-up problem, named.
    pub fn new(settings: &ExampleSettings, shared: &Shared, random: Arc<dyn Random>) -> Result<Self, Vec<String>> {
        let products: Arc<dyn ProductBackend> = match &settings.database_url {
            Some(url) => Arc::new(db_adapter::postgres::PostgresProducts::new(url).map_err(|problem| vec![problem])?),
            None => Arc::new(db_adapter::fixture::ReadOnlyStore),
        };
        Ok(Self {
            items: query_command::item_store(shared),
            names: secure_tools::name_list(shared),
            products,
            sandbox: Arc::new(VercelSandbox::new(
                settings.sandbox_api_base_url.clone(),
                settings.sandbox_oidc_token.clone(),
            )),
            sandbox_runs: RunCounter::new(shared, random),
        })
    }

    /// One line for the start-up banner.
    pub fn describe(&self) -> String {
        format!("db-adapter: {}", self.products.describe())
    }
}

/// What every example registration receives: the process's logger, randomness, job and task
/// services, and the examples' backends.
#[derive(Clone)]
pub struct Services {
    /// The structured log every route writes.
    pub logger: Logger,
    /// Randomness for identifiers.
    pub random: Arc<dyn Random>,
    /// The async-jobs service.
    pub jobs: Arc<Jobs>,
    /// The tasks extension.
    pub tasks: Arc<TaskService>,
    /// The query-command example's items.
    pub items: Arc<dyn query_command::ItemStore>,
    /// The secure-tools example's names.
    pub names: Arc<dyn secure_tools::NameList>,
    /// The db-adapter example's products.
    pub products: Arc<dyn ProductBackend>,
    /// The sandbox-isolation example's Vercel Sandbox client.
    pub sandbox: Arc<dyn SandboxClient>,
    /// Where the sandbox-isolation example counts each caller's runs.
    pub sandbox_runs: RunCounter,
}

impl Services {
    /// The services over `backends`.
    pub fn new(
        backends: &Backends,
        logger: Logger,
        random: Arc<dyn Random>,
        jobs: Arc<Jobs>,
        tasks: Arc<TaskService>,
    ) -> Self {
        Self {
            logger,
            random,
            jobs,
            tasks,
            items: backends.items.clone(),
            names: backends.names.clone(),
            products: backends.products.clone(),
            sandbox: backends.sandbox.clone(),
            sandbox_runs: backends.sandbox_runs.clone(),
        }
    }

    /// The facade example, auditing and reporting faults as log lines.
    pub fn facade(&self) -> Arc<Facade> {
        let lines = Arc::new(facade::LogLines(self.logger.clone()));
        Arc::new(Facade::new(lines.clone(), lines, self.random.clone()))
    }

    /// The db-adapter example over the products, logging reads as log lines.
    pub fn db_adapter(&self) -> Arc<DbAdapter> {
        Arc::new(DbAdapter::new(self.products.clone(), Arc::new(db_adapter::LoggedQueries(self.logger.clone()))))
    }
}
