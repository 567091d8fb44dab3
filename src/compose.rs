//! The composition root: the one module that knows every part. It turns [`Settings`] into the
//! process's parts (where shared records live, the job backend, the change bus, the nonce store,
//! the examples' backends) and builds from them each route's application, the queue consumer and
//! the cron sweep. Nothing below it imports it; the edges (`vercel`, `local`, the binaries) call it.

use std::sync::Arc;

use crate::catalogue::{self, Backends, Services};
use crate::jobs::{self, Jobs, JobsBackend, RedisStreamQueue, Transport, VercelQueue};
use crate::observe::{LogSink, Logger, StderrSink};
use crate::server::McpServer;
use crate::server::listen::ListenLimits;
use crate::settings::{ConfigError, QueueChoice, Settings, listen_limit_for};
use crate::state::{ChangeBus, Clock, InstanceOnlyBus, LocalBus, NonceStore, Random, RedisBus, SystemRandom};
use crate::store::{Redis, Shared};
use crate::tasks::{TaskService, TaskStore};
use crate::telemetry::Telemetry;
use crate::transport::{App, Endpoint};

/// This crate's version, reported in `serverInfo`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything one process is built from, shared by every route it serves.
#[derive(Clone)]
pub struct Parts {
    /// The parsed settings.
    pub settings: Settings,
    /// Randomness for identifiers.
    pub random: Arc<dyn Random>,
    /// Where structured log lines go (standard error by default).
    pub log_sink: Arc<dyn LogSink>,
    /// Where records shared between instances live.
    pub shared: Shared,
    /// Job store and queue: Redis and Vercel Queues when deployed; in-memory and in-process
    /// locally unless `REDIS_URL` (store) or `MCP_QUEUE_BASE_URL` (queue) say otherwise.
    pub jobs: JobsBackend,
    /// Where task records (the tasks extension) live.
    pub task_store: Arc<dyn TaskStore>,
    /// Change signals for listen streams: Redis pub/sub with `REDIS_URL`, in-process otherwise.
    pub bus: Arc<dyn ChangeBus>,
    /// Where used `requestState` nonces are kept, or `None` when
    /// `MCP_REQUEST_STATE_SINGLE_USE=off`.
    pub request_state_nonces: Option<Arc<dyn NonceStore>>,
    /// The examples' stores and clients.
    pub examples: Backends,
    /// Where spans go (off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set).
    pub telemetry: Telemetry,
    /// The listen streams open in this process, per caller: one count for every endpoint it
    /// serves, so the caps hold per instance (the local run and `api/examples.rs` serve many).
    pub listen_slots: Arc<crate::security::Slots>,
    /// The tasks running in this process, per caller: one count for every task service these
    /// parts make, so the task caps hold per instance too.
    pub task_slots: Arc<crate::security::Slots>,
    /// The process is stopping: shared by every endpoint and task service these parts make.
    pub stopping: crate::state::Stopping,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts").field("settings", &self.settings).field("shared", &self.shared).finish_non_exhaustive()
    }
}

impl Parts {
    /// Reads the process environment and builds the parts.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(Settings::from_env()?)
    }

    /// Reads settings through `lookup` (tests pass a map) and builds the parts.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        Self::new(Settings::from_lookup(lookup, clock)?)
    }

    /// Builds the parts `settings` describe. Opens no connection: Redis and PostgreSQL connect on
    /// first use. A Redis or database URL that does not parse is a start-up problem.
    pub fn new(settings: Settings) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let shared = match &settings.redis {
            Some(redis) => match Redis::connect_trusting(&redis.url, &redis.prefix, redis.ca_pem.as_deref()) {
                Ok(redis) => Shared::Redis(redis),
                Err(problem) => {
                    problems.push(problem);
                    Shared::Memory
                }
            },
            None if settings.deployed => Shared::Unconfigured,
            None => Shared::Memory,
        };
        let random: Arc<dyn Random> = Arc::new(SystemRandom::default());
        let examples = Backends::new(&settings.examples, &shared, random.clone()).map_err(|mut more| {
            problems.append(&mut more);
        });
        let telemetry = settings.telemetry.as_ref().map_or_else(Telemetry::off, Telemetry::new);
        let (Ok(examples), true) = (examples, problems.is_empty()) else { return Err(ConfigError(problems)) };
        let transport = match (&settings.queue, &shared) {
            (QueueChoice::Vercel(queue), _) => Transport::Vercel(Arc::new(VercelQueue::new(
                queue.base_url.clone(),
                queue.region.clone(),
                queue.deployment_id.clone(),
                queue.oidc_token.clone(),
            ))),
            (QueueChoice::RedisStreams(streams), Shared::Redis(redis)) => {
                Transport::RedisStreams(Arc::new(RedisStreamQueue::new(redis.clone(), consumer_name(), *streams)))
            }
            // Settings choose Redis Streams only with REDIS_URL, which makes the store Redis.
            (QueueChoice::RedisStreams(_) | QueueChoice::Local, _) => Transport::Local,
        };
        let bus: Arc<dyn ChangeBus> = match &shared {
            Shared::Redis(redis) => RedisBus::new(redis),
            Shared::Memory => Arc::new(LocalBus::default()),
            // A listen stream would hear only this instance's changes: refused, naming the variable.
            Shared::Unconfigured => Arc::new(InstanceOnlyBus::new(
                crate::store::redis_url_unset("listen streams (changes made on any instance)").message(),
            )),
        };
        Ok(Self {
            random,
            log_sink: Arc::new(StderrSink::default()),
            jobs: JobsBackend::new(&shared, transport),
            task_store: crate::tasks::task_store(&shared),
            bus,
            request_state_nonces: settings.request_state_single_use.then(|| crate::state::nonce_store(&shared)),
            examples,
            telemetry,
            listen_slots: Arc::default(),
            task_slots: Arc::default(),
            stopping: crate::state::Stopping::default(),
            shared,
            settings,
        })
    }

    /// Parts for tests: local posture, a fixed sealing key, the given clock, everything in memory.
    pub fn for_tests(clock: Arc<dyn Clock>) -> Self {
        Self::new(Settings::for_tests(clock)).expect("test settings compose")
    }

    /// The logger every route of this process uses.
    pub fn logger(&self) -> Logger {
        Logger::new(self.log_sink.clone(), self.settings.sealer.clone(), self.random.clone())
            .with_request_lines(self.settings.request_lines)
    }

    /// One line for the start-up banner: where records live, which queue, which product data.
    pub fn describe(&self) -> String {
        let store = match &self.shared {
            Shared::Memory => "in-memory store".to_owned(),
            Shared::Redis(redis) => format!("Redis store (prefix {})", redis.prefix()),
            Shared::Unconfigured => "no store (REDIS_URL unset)".to_owned(),
        };
        format!("jobs: {store}, {}; {}", self.settings.queue.name(), self.examples.describe())
    }

    /// What `/api/mcp` is served with: the deployment's own protected resource.
    pub fn endpoint(&self) -> Endpoint {
        let settings = &self.settings;
        Endpoint {
            sealer: settings.sealer.clone(),
            origins: settings.allowed_origins.clone(),
            bus: self.bus.clone(),
            max_body_bytes: settings.max_body_bytes,
            listen: ListenLimits { max_duration: settings.listen_max_duration, keep_alive: settings.keep_alive },
            listen_caps: settings.listen_caps,
            auth: settings.auth.clone(),
            logger: self.logger(),
            platform: settings.platform.clone(),
            request_state_nonces: self.request_state_nonces.clone(),
            telemetry: self.telemetry.clone(),
            listen_slots: self.listen_slots.clone(),
            stopping: self.stopping.clone(),
        }
    }

    /// The job service over the process's store and queue.
    pub fn job_service(&self) -> Arc<Jobs> {
        Arc::new(self.build_jobs())
    }

    fn build_jobs(&self) -> Jobs {
        let settings = &self.settings;
        Jobs::new(
            self.jobs.store.clone(),
            self.jobs.publisher.clone(),
            settings.sealer.clone(),
            settings.clock.clone(),
            self.random.clone(),
        )
        .with_logger(self.logger())
        .with_limits(settings.job_limits)
    }

    /// The tasks extension over the process's task store, for `/api/mcp`.
    pub fn task_service(&self) -> Arc<TaskService> {
        Arc::new(self.build_tasks())
    }

    fn build_tasks(&self) -> TaskService {
        TaskService::new(self.task_store.clone(), self.settings.clock.clone(), self.random.clone(), self.bus.clone())
            .with_logger(self.logger())
            .with_caps(self.settings.task_caps)
            .with_running_slots(self.task_slots.clone())
            .with_quota(self.settings.task_quota)
            .with_round_limit(self.settings.task_round_limit)
            .with_stopping(self.stopping.clone())
    }

    /// What the examples' registrations receive on `/api/mcp`.
    pub fn services(&self) -> Services {
        Services::new(&self.examples, self.logger(), self.random.clone(), self.job_service(), self.task_service())
    }

    /// What an example's registration receives on its own endpoint, at `path`: its tasks and job
    /// handles are that endpoint's ([`TaskService::for_endpoint`], [`jobs::Jobs::for_endpoint`]).
    pub fn services_at(&self, path: &str) -> Services {
        let tasks = Arc::new(self.build_tasks().for_endpoint(path));
        let jobs = Arc::new(self.build_jobs().for_endpoint(path));
        Services::new(&self.examples, self.logger(), self.random.clone(), jobs, tasks)
    }
}

/// This process's name among the stream's consumers: unique per process, so a restarted process
/// is a new consumer and what the old one held is reclaimed rather than waited for.
fn consumer_name() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 6];
    ring::rand::SystemRandom::new().fill(&mut bytes).expect("the OS random source works");
    format!("{}-{}", std::process::id(), crate::state::seal::hex(&bytes))
}

/// What `/api/mcp` serves: the one list to edit when this kit becomes your server.
///
/// Register your own tools here (`docs/guide.md` shows how). Every reference example is served
/// on its own at `/api/examples/<name>` whatever this list says; a line below also serves one on
/// `/api/mcp`. The default is small: `echo`, the async job tools (a job through Vercel Queues),
/// and `whoami` (who the access token says the caller is).
pub fn configure_server(server: &mut McpServer, parts: &Parts) {
    let services = parts.services();
    server.enable_tasks(services.tasks.clone());

    // Your tools, e.g. `crate::tools::register(server);` (docs/guide.md shows the module)

    // Reference examples, opt-in on /api/mcp:
    catalogue::minimal::register(server);
    catalogue::async_jobs::register(server, services.jobs.clone());
    catalogue::auth_server::register(server, services.logger.clone());
    // catalogue::resources::register(server);
    // catalogue::elicitation::register(server, Arc::new(catalogue::elicitation::NoCalendar));
    // catalogue::sampling::register(server);
    // catalogue::query_command::register(server, services.items.clone(), services.logger.clone());
    // catalogue::secure_tools::register(server, services.names.clone(), services.logger.clone());
    // catalogue::facade::register(server, services.facade());
    // catalogue::least_privilege::register(server, Arc::new(catalogue::least_privilege::DiscardLedger));
    // catalogue::db_adapter::register(server, services.db_adapter());
    // catalogue::sandbox_isolation::register(
    //     server,
    //     services.sandbox.clone(),
    //     services.sandbox_runs.clone(),
    //     services.logger.clone(),
    // );
}

/// The `/api/mcp` application.
pub fn mcp_app(parts: &Parts) -> Arc<App> {
    let mut server = McpServer::new(parts.settings.server_name.clone(), VERSION);
    configure_server(&mut server, parts);
    Arc::new(App::new(server, parts.endpoint()))
}

/// The app of one example route (`/api/examples/<name>`), or `None` for an unknown name.
/// Each example is its own protected resource: tokens must name its URL (the configured origin
/// plus its path) as their audience, and its metadata is at
/// `/.well-known/oauth-protected-resource/api/examples/<name>`.
pub fn example_app(name: &str, parts: &Parts) -> Option<Arc<App>> {
    let example = catalogue::example(name)?;
    let settings = &parts.settings;
    let path = format!("/api/examples/{}", example.name);
    let mut server = McpServer::new(example.server_name, VERSION);
    (example.register)(&mut server, &parts.services_at(&path));
    let scopes = settings
        .example_route_scopes
        .get(example.name)
        .cloned()
        .unwrap_or_else(|| settings.auth.config().route_scopes.clone());
    let mut endpoint = parts.endpoint();
    endpoint.auth = settings.auth.for_endpoint(&path, scopes);
    // The examples share `api/examples.rs`, whose maxDuration is shorter than /api/mcp's.
    endpoint.listen.max_duration = listen_limit_for("api/examples.rs", settings.listen_max_duration);
    Some(Arc::new(App::new(server, endpoint)))
}

/// The queue consumer of `/api/queues/process-job`.
pub fn consumer(parts: &Parts) -> jobs::Consumer {
    jobs::Consumer {
        store: parts.jobs.store.clone(),
        queue: parts.jobs.queue_api.clone(),
        clock: parts.settings.clock.clone(),
        step_delay: parts.settings.job_step_delay,
        budget: parts.settings.consumer_budget,
        logger: Some(parts.logger()),
        telemetry: parts.telemetry.clone(),
        platform: parts.settings.platform.clone(),
        confirm_faults: Arc::default(),
    }
}

/// The cron sweep of `/api/cron/sweep-jobs`.
pub fn sweep(parts: &Parts) -> jobs::Sweep {
    jobs::Sweep::new(parts.jobs.store.clone(), parts.settings.clock.clone(), parts.settings.cron_secret.clone())
        .with_logger(parts.logger())
}

/// Reads the environment and builds the parts, or exits with a message naming every problem.
/// Used by the binaries.
pub fn parts_or_exit() -> Parts {
    match Parts::from_env() {
        Ok(parts) => {
            eprintln!("{}", parts.describe());
            if parts.settings.ephemeral_secret {
                eprintln!(
                    "warning: MCP_STATE_SECRET is not set; using an ephemeral sealing key. requestState and session ids \
                     will not survive a restart or be accepted by another process. Set MCP_STATE_SECRET for anything shared."
                );
            }
            parts
        }
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(2);
        }
    }
}
