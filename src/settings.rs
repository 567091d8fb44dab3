//! Every environment variable the library reads, parsed and validated once at start-up, into
//! [`Settings`]. Nothing here opens a connection or builds a store: that is `compose`'s work.
//!
//! Two postures: *deployed* (`VERCEL` is set, or `VERCEL_IPC_PATH`, the socket through which the
//! platform's Rust runtime reaches a function: `VERCEL` is one of the system variables a project
//! may choose not to expose, and `vercel dev` sets neither), where anything that would silently keep state
//! in one instance's memory or weaken security is refused; and *local*, where embedded
//! defaults (an ephemeral sealing key, in-memory stores) let one command run everything.
//! Problems are collected and reported together, each naming its variable.

use std::sync::Arc;
use std::time::Duration;

use crate::security::auth::KeySource;
use crate::security::jwks::{JwksCache, parse_jwks};
use crate::security::resource::RESOURCE_URL_ENV;
use crate::security::{AllowedOrigins, AuthConfig, AuthMode, Authenticator, CanonicalResource};
use crate::state::{Clock, SealFormat, Sealer, SystemClock, seal::derived_key_id};
use jsonwebtoken::Algorithm;

/// Every setting, parsed and validated. The clock is an input because the sealing keys and the
/// JWKS cache are judged by it.
#[derive(Clone)]
pub struct Settings {
    /// Running on Vercel (`VERCEL` set).
    pub deployed: bool,
    /// `MCP_ALLOWED_ORIGINS`.
    pub allowed_origins: AllowedOrigins,
    /// Sealer built from `MCP_STATE_SECRET` (or an ephemeral key in the local run).
    pub sealer: Sealer,
    /// True when the sealing key was generated at start-up (local run only).
    pub ephemeral_secret: bool,
    /// `MCP_MAX_BODY_BYTES`: largest accepted request body.
    pub max_body_bytes: usize,
    /// `MCP_LISTEN_MAX_SECONDS`: when a listen stream closes gracefully.
    pub listen_max_duration: Duration,
    /// `MCP_KEEPALIVE_SECONDS`: keep-alive comment interval on long streams.
    pub keep_alive: Duration,
    /// `MCP_LISTEN_MAX_PER_PRINCIPAL`, `MCP_LISTEN_MAX_TOTAL`: open listen streams (and 2025 calls
    /// waiting for the client's answer) one caller, and one instance, may hold.
    pub listen_caps: crate::server::listen::ListenCaps,
    /// `MCP_TASKS_MAX_PER_PRINCIPAL`, `MCP_TASKS_MAX_TOTAL`: tasks one caller, and one instance,
    /// may have running at once.
    pub task_caps: crate::security::SlotCaps,
    /// `MCP_TASK_SHARE`, `MCP_TASKS_PER_MINUTE`, `MCP_TASKS_HELD_TOTAL`: tasks one caller may
    /// hold (in any status, until they expire) and create per minute, and all callers together
    /// may hold, across every instance.
    pub task_quota: crate::tasks::TaskQuota,
    /// `MCP_TASK_ROUND_SECONDS`: how long one round of a task's work may run before the task
    /// fails (280 s; deployed, at most `/api/mcp`'s `maxDuration` less 10 s).
    pub task_round_limit: Duration,
    /// `MCP_HEADER_TIMEOUT_SECONDS`, `MCP_BODY_TIMEOUT_SECONDS`, `MCP_MAX_CONNECTIONS`: how the local
    /// run treats slow and numerous clients (on Vercel the platform terminates HTTP).
    pub connection_limits: ConnectionLimits,
    /// `MCP_SERVER_NAME`: the name reported in `serverInfo`.
    pub server_name: String,
    /// Time source for expiry everywhere.
    pub clock: Arc<dyn Clock>,
    /// `REDIS_URL` and `MCP_REDIS_PREFIX`: where shared records live, if anywhere.
    pub redis: Option<RedisSettings>,
    /// `MCP_QUEUE` (and what each transport reads): which queue carries jobs.
    pub queue: QueueChoice,
    /// `CRON_SECRET`: the bearer token Vercel Cron presents to the sweep.
    pub cron_secret: Option<String>,
    /// `MCP_JOB_STEP_MS`: simulated work per job step.
    pub job_step_delay: Duration,
    /// `MCP_CONSUMER_BUDGET_SECONDS`: how long one delivery may work before deferring.
    pub consumer_budget: Duration,
    /// `MCP_JOB_CAP_ANONYMOUS`, `MCP_JOB_CAP_VERIFIED`, `MCP_MAX_JOBS_TOTAL`, `MCP_JOB_SHARE`,
    /// `MCP_JOBS_PER_MINUTE`.
    pub job_limits: crate::jobs::service::JobLimits,
    /// Authentication (`MCP_AUTH_*`, `MCP_RESOURCE_URL`, `MCP_JWKS*`).
    pub auth: Authenticator,
    /// `MCP_AUTH_SCOPES_<EXAMPLE>` (e.g. `MCP_AUTH_SCOPES_ASYNC_JOBS`): the scopes every request to
    /// `/api/examples/<example>` needs; an example without one needs `MCP_AUTH_SCOPES`.
    pub example_route_scopes: std::collections::HashMap<&'static str, Vec<String>>,
    /// `MCP_REQUEST_STATE_SINGLE_USE` (default on): whether used `requestState` nonces are kept.
    pub request_state_single_use: bool,
    /// `MCP_REQUEST_LOG` (`all` by default, or `failures`): which requests get a request line.
    pub request_lines: crate::observe::RequestLines,
    /// `VERCEL_PROJECT_ID` and the environment: which request OIDC tokens name this deployment.
    pub platform: crate::security::PlatformIdentity,
    /// The examples' own settings.
    pub examples: crate::catalogue::ExampleSettings,
    /// `OTEL_*`: where traces go, or `None` (the default) for none.
    pub telemetry: Option<crate::telemetry::TelemetrySettings>,
}

/// Where the shared Redis is. The URL carries the password: never printed.
#[derive(Clone)]
pub struct RedisSettings {
    /// `REDIS_URL`.
    pub url: String,
    /// `MCP_REDIS_PREFIX` (`mcp` by default): every key starts with it.
    pub prefix: String,
    /// `MCP_REDIS_CA_PEM`: the certificate authority a `rediss://` server's certificate must chain
    /// to, instead of the public roots (a self-hosted Redis with a private authority).
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// Which queue carries jobs (`MCP_QUEUE=vercel|redis|local`). Unset: Vercel Queues when
/// deployed (or pointed at a stand-in with `MCP_QUEUE_BASE_URL`), a Redis stream off Vercel with
/// `REDIS_URL`, and the in-process queue otherwise.
#[derive(Clone, Debug)]
pub enum QueueChoice {
    /// Vercel Queues.
    Vercel(QueueSettings),
    /// A Redis stream every instance consumes (`MCP_QUEUE_MAX_LEN`, `MCP_QUEUE_RECLAIM_IDLE_MS`,
    /// `MCP_QUEUE_MAX_DELIVERIES`, `MCP_QUEUE_CONCURRENCY`).
    RedisStreams(crate::jobs::queue::StreamSettings),
    /// The in-process queue: the local run without Redis.
    Local,
}

impl QueueChoice {
    /// The setting's value, for the start-up banner.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Vercel(_) => "Vercel Queues",
            Self::RedisStreams(_) => "Redis Streams",
            Self::Local => "in-process queue",
        }
    }
}

/// How to reach Vercel Queues.
#[derive(Clone)]
pub struct QueueSettings {
    /// `MCP_QUEUE_BASE_URL`: a stand-in's URL (tests); the regional endpoint otherwise.
    pub base_url: Option<String>,
    /// `VERCEL_REGION`.
    pub region: Option<String>,
    /// `VERCEL_DEPLOYMENT_ID`.
    pub deployment_id: Option<String>,
    /// `VERCEL_OIDC_TOKEN`: the local run's credential (deployed, each request brings its own).
    pub oidc_token: Option<String>,
}

impl std::fmt::Debug for QueueSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a credential.
        f.debug_struct("QueueSettings")
            .field("base_url", &self.base_url)
            .field("region", &self.region)
            .field("deployment_id", &self.deployment_id)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out: the sealer prints key ids only; the cron secret is not printed.
        f.debug_struct("Settings")
            .field("deployed", &self.deployed)
            .field("allowed_origins", &self.allowed_origins)
            .field("sealer", &self.sealer)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("redis", &self.redis)
            .field("queue", &self.queue.name())
            .field("cron_secret_set", &self.cron_secret.is_some())
            .field("auth", self.auth.config())
            .finish_non_exhaustive()
    }
}

/// How long a client may take to send its request head and its body, and how many connections
/// the local run serves at once (the rest wait in the listen backlog).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accepting a connection (or finishing the previous request on it) to a complete head.
    pub header_timeout: Duration,
    /// To receive the whole body once the head is in.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self { header_timeout: Duration::from_secs(10), body_timeout: Duration::from_secs(30), max_connections: 1024 }
    }
}

/// Start-up refused: one line per problem, each naming its variable. Never contains secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub Vec<String>);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for problem in &self.0 {
            writeln!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Default largest request body: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Seconds a listen stream needs, after `MCP_LISTEN_MAX_SECONDS`, to send its result and close
/// before the MCP function's `maxDuration` cuts it.
pub const LISTEN_CLOSE_MARGIN_SECONDS: u64 = 10;
/// Seconds a task round needs, after `MCP_TASK_ROUND_SECONDS`, to record that it ran out of time
/// before the MCP function's `maxDuration` cuts it.
pub const TASK_FAILURE_MARGIN_SECONDS: u64 = 10;
/// Seconds a queue delivery needs, after `MCP_CONSUMER_BUDGET_SECONDS` (counted from its arrival,
/// the lease's confirmation included), to store the step it is in, acknowledge its lease (a call
/// of up to `QUEUE_CALL_TIMEOUT`, 5 s) and answer, before the consumer's `maxDuration` cuts it.
pub const CONSUMER_DEFER_MARGIN_SECONDS: u64 = 10;

/// `vercel.json`, compiled in. The executables and the file deploy from one checkout, so a
/// duration setting that would outlast its function is refused at start-up instead of being cut
/// off by the platform in the middle of a stream or a job step.
const VERCEL_JSON: &str = include_str!("../vercel.json");

/// The `maxDuration` that `vercel.json` gives `function` (`api/mcp.rs`, say).
pub fn max_duration_seconds(function: &str) -> Option<u64> {
    let config: serde_json::Value = serde_json::from_str(VERCEL_JSON).ok()?;
    config["functions"][function]["maxDuration"].as_u64()
}

/// Whether a Redis URL is plain `redis://` to a host other than this machine.
fn plaintext_beyond_this_machine(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|url| url.scheme() == "redis" && !crate::outbound::is_loopback(&url))
}

/// The key prefix when `MCP_REDIS_PREFIX` is unset: `mcp`, and deployed to an environment other
/// than production, `mcp:<environment>`, so that a preview given production's database by
/// mistake counts and keeps nothing of production's (its jobs, tasks and totals).
fn default_redis_prefix(deployed: bool, var: &dyn Fn(&str) -> Option<String>) -> String {
    let environment = var("VERCEL_TARGET_ENV").or_else(|| var("VERCEL_ENV"));
    match environment.as_deref().map(str::trim) {
        Some(environment) if deployed && environment != "production" => {
            let named: String = environment
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c.to_ascii_lowercase() } else { '-' })
                .take(32)
                .collect();
            format!("mcp:{named}")
        }
        _ => "mcp".into(),
    }
}

/// Variables named like a route's scopes (`MCP_AUTH_SCOPES_<EXAMPLE>`) that name no example: a
/// misspelt one would leave its route on the global scopes without a word.
pub fn unknown_route_scope_variables(names: impl Iterator<Item = String>) -> Vec<String> {
    let known: Vec<String> = crate::catalogue::EXAMPLES
        .iter()
        .map(|example| format!("MCP_AUTH_SCOPES_{}", example.name.to_ascii_uppercase().replace('-', "_")))
        .collect();
    names
        .filter(|name| name.starts_with("MCP_AUTH_SCOPES_") && name != "MCP_AUTH_SCOPES_SUPPORTED")
        .filter(|name| !known.contains(name))
        .map(|name| format!("{name} names no example route (they are {})", known.join(", ")))
        .collect()
}

/// The items `value` lists, separated by commas or spaces.
fn listed(value: &str) -> Vec<String> {
    value.split([',', ' ']).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// The scopes `value` lists ([`listed`]), each checked against RFC 6749's
/// scope-token characters: they are written into `WWW-Authenticate` challenges, where a space, a
/// quote or a non-ASCII character would break the header (and a challenge that cannot be sent
/// leaves clients unable to find the authorization server).
fn scope_list(name: &str, value: String, problems: &mut Vec<String>) -> Vec<String> {
    let scopes = listed(&value);
    let is_scope_char = |b: u8| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b);
    if scopes.iter().any(|scope| !scope.bytes().all(is_scope_char)) {
        problems.push(format!(
            "{name} must list scopes of printable ASCII without quotes or backslashes, separated by commas or spaces"
        ));
    }
    scopes
}

/// The longest a listen stream may stay open on `function`: `configured`, shortened so the
/// stream closes [`LISTEN_CLOSE_MARGIN_SECONDS`] before that function's `maxDuration`. The
/// example routes share a function with a shorter `maxDuration` than `/api/mcp`'s.
pub fn listen_limit_for(function: &str, configured: Duration) -> Duration {
    match max_duration_seconds(function) {
        Some(max) => configured.min(Duration::from_secs(max.saturating_sub(LISTEN_CLOSE_MARGIN_SECONDS).max(1))),
        None => configured,
    }
}

/// On Vercel, each duration setting must leave its function time to finish cleanly.
fn check_durations(listen: u64, task_round: u64, budget: u64, problems: &mut Vec<String>) {
    let settings = [
        ("MCP_LISTEN_MAX_SECONDS", listen, "api/mcp.rs", LISTEN_CLOSE_MARGIN_SECONDS, "close a listen stream"),
        ("MCP_TASK_ROUND_SECONDS", task_round, "api/mcp.rs", TASK_FAILURE_MARGIN_SECONDS, "record a task's failure"),
        ("MCP_CONSUMER_BUDGET_SECONDS", budget, "api/queues/process-job.rs", CONSUMER_DEFER_MARGIN_SECONDS, "defer"),
    ];
    for (name, value, function, margin, what) in settings {
        let Some(max) = max_duration_seconds(function) else { continue };
        if value + margin > max {
            problems.push(format!(
                "{name} is {value} s but {function} may run {max} s (its maxDuration in vercel.json), and needs \
                 {margin} s to {what}: set {name} to at most {} s, or raise that maxDuration",
                max.saturating_sub(margin)
            ));
        }
    }
}

impl Settings {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let misnamed =
            unknown_route_scope_variables(std::env::vars_os().filter_map(|(name, _)| name.into_string().ok()));
        match Self::from_lookup(|name| std::env::var(name).ok(), Arc::new(SystemClock)) {
            Ok(_) if !misnamed.is_empty() => Err(ConfigError(misnamed)),
            Err(ConfigError(mut problems)) => {
                problems.extend(misnamed);
                Err(ConfigError(problems))
            }
            settings => settings,
        }
    }

    /// Reads configuration through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        // A variable set to nothing (or only spaces) is unset: `.env.example` lists every variable
        // empty, and `vercel dev` loads a copy of it as it is.
        let raw = lookup;
        let lookup = |name: &str| raw(name).filter(|v| !v.trim().is_empty());
        let mut problems = Vec::new();
        let deployed = ["VERCEL", "VERCEL_IPC_PATH"].into_iter().any(|name| lookup(name).is_some());
        let number = |name: &str, default: u64, min: u64, max: u64, problems: &mut Vec<String>| {
            bounded_number(name, lookup(name), default, min..=max, problems)
        };
        let max_body_bytes =
            number("MCP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES as u64, 1024, 64 << 20, &mut problems) as usize;
        let listen = number("MCP_LISTEN_MAX_SECONDS", 280, 1, 3600, &mut problems);
        let keep_alive = number("MCP_KEEPALIVE_SECONDS", 15, 1, 300, &mut problems);
        let listen_defaults = crate::server::listen::DEFAULT_LISTEN_CAPS;
        let listen_caps = crate::server::listen::ListenCaps {
            per_principal: number(
                "MCP_LISTEN_MAX_PER_PRINCIPAL",
                listen_defaults.per_principal as u64,
                1,
                10_000,
                &mut problems,
            ) as usize,
            total: number("MCP_LISTEN_MAX_TOTAL", listen_defaults.total as u64, 1, 1_000_000, &mut problems) as usize,
        };
        let task_defaults = crate::tasks::DEFAULT_TASK_CAPS;
        let task_caps = crate::security::SlotCaps {
            per_principal: number(
                "MCP_TASKS_MAX_PER_PRINCIPAL",
                task_defaults.per_principal as u64,
                1,
                10_000,
                &mut problems,
            ) as usize,
            total: number("MCP_TASKS_MAX_TOTAL", task_defaults.total as u64, 1, 1_000_000, &mut problems) as usize,
        };
        let task_round =
            number("MCP_TASK_ROUND_SECONDS", crate::tasks::DEFAULT_ROUND_LIMIT.as_secs(), 1, 86_400, &mut problems);
        // A round must end, and its outcome be written, while the task's record still lives.
        let longest_round = crate::tasks::TASK_TTL_MS / 1000 - TASK_FAILURE_MARGIN_SECONDS;
        if task_round > longest_round {
            problems.push(format!(
                "MCP_TASK_ROUND_SECONDS is {task_round} s but a task's record lives {} s, and a round needs {} s \
                 to record how it ended: set it to at most {longest_round} s",
                crate::tasks::TASK_TTL_MS / 1000,
                TASK_FAILURE_MARGIN_SECONDS
            ));
        }
        let quota_defaults = crate::tasks::TaskQuota::default();
        let task_quota = crate::tasks::TaskQuota {
            share: number("MCP_TASK_SHARE", quota_defaults.share.into(), 1, 10_000_000, &mut problems) as u32,
            per_minute: number("MCP_TASKS_PER_MINUTE", quota_defaults.per_minute.into(), 1, 1_000_000, &mut problems)
                as u32,
            total: number("MCP_TASKS_HELD_TOTAL", quota_defaults.total.into(), 1, 10_000_000, &mut problems) as u32,
        };
        let connection_defaults = ConnectionLimits::default();
        let connection_limits = ConnectionLimits {
            header_timeout: Duration::from_secs(number(
                "MCP_HEADER_TIMEOUT_SECONDS",
                connection_defaults.header_timeout.as_secs(),
                1,
                300,
                &mut problems,
            )),
            body_timeout: Duration::from_secs(number(
                "MCP_BODY_TIMEOUT_SECONDS",
                connection_defaults.body_timeout.as_secs(),
                1,
                600,
                &mut problems,
            )),
            max_connections: number(
                "MCP_MAX_CONNECTIONS",
                connection_defaults.max_connections as u64,
                1,
                1_000_000,
                &mut problems,
            ) as usize,
        };
        let step_ms = number("MCP_JOB_STEP_MS", 100, 0, 60_000, &mut problems);
        let budget = number("MCP_CONSUMER_BUDGET_SECONDS", 50, 1, 800, &mut problems);
        // The longest job's work must fit in half its deadline, the rest left for the queue:
        // waiting for a delivery, and one after each that deferred. Past it, a long job is
        // accepted and then always fails.
        use crate::jobs::model::{JOB_DEADLINE_MS, MAX_STEPS};
        let most_work_ms = u64::from(MAX_STEPS).saturating_mul(step_ms);
        if most_work_ms > JOB_DEADLINE_MS / 2 {
            problems.push(format!(
                "MCP_JOB_STEP_MS is {step_ms} ms: a job of {MAX_STEPS} steps would work {} s, more than half of the {} s \
                 a job may take; set it to at most {} ms",
                most_work_ms / 1000,
                JOB_DEADLINE_MS / 1000,
                JOB_DEADLINE_MS / 2 / u64::from(MAX_STEPS)
            ));
        }
        if step_ms >= budget.saturating_mul(1000) {
            problems.push(format!(
                "MCP_JOB_STEP_MS is {step_ms} ms but a delivery may work MCP_CONSUMER_BUDGET_SECONDS ({budget} s): \
                 no step would fit; set MCP_JOB_STEP_MS below {} or raise the budget",
                budget.saturating_mul(1000)
            ));
        }
        if deployed {
            check_durations(listen, task_round, budget, &mut problems);
        }
        let defaults = crate::jobs::service::JobLimits::default();
        let job_limits = crate::jobs::service::JobLimits {
            anonymous: number("MCP_JOB_CAP_ANONYMOUS", defaults.anonymous.into(), 0, 1_000_000, &mut problems) as u32,
            verified: number("MCP_JOB_CAP_VERIFIED", defaults.verified.into(), 1, 1_000_000, &mut problems) as u32,
            total: number("MCP_MAX_JOBS_TOTAL", defaults.total.into(), 1, 10_000_000, &mut problems) as u32,
            share: number("MCP_JOB_SHARE", defaults.share.into(), 1, 10_000_000, &mut problems) as u32,
            per_minute: number("MCP_JOBS_PER_MINUTE", defaults.per_minute.into(), 1, 1_000_000, &mut problems) as u32,
        };
        let non_empty = &lookup;
        let single_use =
            switch("MCP_REQUEST_STATE_SINGLE_USE", non_empty("MCP_REQUEST_STATE_SINGLE_USE"), true, &mut problems);
        let (sealer, ephemeral_secret) = match lookup("MCP_STATE_SECRET") {
            Some(raw) => match Sealer::from_env_value(&raw, clock.clone()) {
                Ok(sealer) => (Some(sealer), false),
                Err(problem) => {
                    problems.push(format!("MCP_STATE_SECRET: {problem}"));
                    (None, false)
                }
            },
            None if deployed => {
                problems.push(format!(
                    "MCP_STATE_SECRET is required when deployed (at least 32 random bytes). Fix: {}",
                    set_with("MCP_STATE_SECRET", "the output of `openssl rand -hex 32`")
                ));
                (None, false)
            }
            None => (Some(ephemeral_sealer(clock.clone())), true),
        };
        let seal_format = match non_empty("MCP_SEAL_FORMAT").as_deref().map(str::trim) {
            None | Some("v2") => SealFormat::V2,
            Some("v1") => SealFormat::V1,
            Some(_) => {
                problems.push("MCP_SEAL_FORMAT must be v1 or v2".into());
                SealFormat::V2
            }
        };
        let sealer = sealer.map(|sealer| sealer.sealing(seal_format));
        let request_lines = match non_empty("MCP_REQUEST_LOG").as_deref().map(str::trim) {
            None | Some("all") => crate::observe::RequestLines::All,
            Some("failures") => crate::observe::RequestLines::Failures,
            Some(_) => {
                problems.push("MCP_REQUEST_LOG must be all or failures".into());
                crate::observe::RequestLines::All
            }
        };
        let examples = crate::catalogue::ExampleSettings::from_lookup(&non_empty).unwrap_or_else(|mut problems_of| {
            problems.append(&mut problems_of);
            crate::catalogue::ExampleSettings::default()
        });
        let auth = match auth_config(deployed, &non_empty, clock.clone()) {
            Ok(auth) => Some(auth),
            Err(mut auth_problems) => {
                problems.append(&mut auth_problems);
                None
            }
        };
        // The queue's and the sandbox's stand-ins receive the project's OIDC token.
        for name in ["MCP_QUEUE_BASE_URL", "MCP_SANDBOX_API_BASE_URL"] {
            if non_empty(name).is_some_and(|url| !crate::outbound::encrypted_or_loopback(&url)) {
                problems.push(format!("{name} must be an https URL, or http to a loopback stand-in"));
            }
        }
        let vercel = || QueueSettings {
            base_url: non_empty("MCP_QUEUE_BASE_URL"),
            region: non_empty("VERCEL_REGION"),
            deployment_id: non_empty("VERCEL_DEPLOYMENT_ID"),
            oidc_token: non_empty("VERCEL_OIDC_TOKEN"),
        };
        let defaults = crate::jobs::queue::StreamSettings::default();
        let streams = crate::jobs::queue::StreamSettings {
            max_len: number("MCP_QUEUE_MAX_LEN", defaults.max_len.into(), 1, 10_000_000, &mut problems) as u32,
            reclaim_idle: Duration::from_millis(number(
                "MCP_QUEUE_RECLAIM_IDLE_MS",
                defaults.reclaim_idle.as_millis() as u64,
                100,
                3_600_000,
                &mut problems,
            )),
            max_deliveries: number("MCP_QUEUE_MAX_DELIVERIES", defaults.max_deliveries.into(), 1, 1000, &mut problems)
                as u32,
            concurrency: number("MCP_QUEUE_CONCURRENCY", defaults.concurrency as u64, 1, 1024, &mut problems) as usize,
        };
        let has_redis = non_empty("REDIS_URL").is_some();
        let queue = match non_empty("MCP_QUEUE").as_deref().map(str::trim) {
            Some("vercel") => QueueChoice::Vercel(vercel()),
            Some("redis") if !has_redis => {
                problems.push("MCP_QUEUE=redis needs REDIS_URL".to_owned());
                QueueChoice::Local
            }
            Some("redis") if deployed => {
                problems.push(
                    "MCP_QUEUE=redis is refused when deployed: a Vercel Function runs only while it serves a request, \
                     so nothing would read the stream. Unset MCP_QUEUE (Vercel Queues is the default there)"
                        .to_owned(),
                );
                QueueChoice::Local
            }
            Some("redis") => QueueChoice::RedisStreams(streams),
            Some("local") if deployed => {
                problems
                    .push("MCP_QUEUE=local is refused when deployed: jobs would live in one instance's memory".into());
                QueueChoice::Local
            }
            Some("local") => QueueChoice::Local,
            Some(_) => {
                problems.push("MCP_QUEUE must be vercel, redis or local".to_owned());
                QueueChoice::Local
            }
            None if deployed || non_empty("MCP_QUEUE_BASE_URL").is_some() => QueueChoice::Vercel(vercel()),
            None if has_redis => QueueChoice::RedisStreams(streams),
            None => QueueChoice::Local,
        };
        let allow_plaintext =
            switch("MCP_REDIS_ALLOW_PLAINTEXT", non_empty("MCP_REDIS_ALLOW_PLAINTEXT"), false, &mut problems);
        if deployed
            && !allow_plaintext
            && let Some(url) = non_empty("REDIS_URL")
            && plaintext_beyond_this_machine(&url)
        {
            // Never the URL: it carries the password.
            problems.push(
                "REDIS_URL is redis:// to a host beyond this machine, so its password and every record would cross \
                 the network in clear: use the rediss:// URL your provider gives, or set \
                 MCP_REDIS_ALLOW_PLAINTEXT=on if the link is private"
                    .to_owned(),
            );
        }
        let example_route_scopes = crate::catalogue::EXAMPLES
            .iter()
            .filter_map(|example| {
                let name = format!("MCP_AUTH_SCOPES_{}", example.name.to_ascii_uppercase().replace('-', "_"));
                Some((example.name, scope_list(&name, non_empty(&name)?, &mut problems)))
            })
            .collect();
        let mut telemetry = crate::telemetry::settings_from(&non_empty).unwrap_or_else(|mut more| {
            problems.append(&mut more);
            None
        });
        if !problems.is_empty() {
            return Err(ConfigError(problems));
        }
        let sealer = sealer.expect("sealer is set when there are no problems");
        if let Some(telemetry) = &mut telemetry {
            telemetry.sampling_key = sealer.derive_key("trace-sampling");
        }
        Ok(Self {
            deployed,
            allowed_origins: AllowedOrigins::parse(
                lookup(crate::security::origin::ALLOWED_ORIGINS_ENV).as_deref(),
                deployed,
            ),
            sealer,
            ephemeral_secret,
            max_body_bytes,
            listen_max_duration: Duration::from_secs(listen),
            keep_alive: Duration::from_secs(keep_alive),
            listen_caps,
            task_caps,
            task_quota,
            task_round_limit: Duration::from_secs(task_round),
            connection_limits,
            server_name: lookup("MCP_SERVER_NAME").unwrap_or_else(|| "vercel-mcp".into()),
            clock: clock.clone(),
            redis: non_empty("REDIS_URL").map(|url| RedisSettings {
                url,
                prefix: non_empty("MCP_REDIS_PREFIX").unwrap_or_else(|| default_redis_prefix(deployed, &non_empty)),
                ca_pem: non_empty("MCP_REDIS_CA_PEM"),
            }),
            queue,
            // Trimmed, as the issuer is: a value pasted with a line end would refuse every sweep.
            cron_secret: non_empty("CRON_SECRET").map(|secret| secret.trim().to_owned()),
            job_step_delay: Duration::from_millis(step_ms),
            consumer_budget: Duration::from_secs(budget),
            job_limits,
            example_route_scopes,
            auth: Authenticator::new(auth.expect("auth is set when there are no problems"), clock.clone()),
            request_state_single_use: single_use,
            request_lines,
            platform: crate::security::PlatformIdentity::from_lookup(&non_empty),
            examples,
            telemetry,
        })
    }

    /// Settings for tests: local posture, a fixed sealing key, the given clock.
    pub fn for_tests(clock: Arc<dyn Clock>) -> Self {
        Self::from_lookup(
            |name| (name == "MCP_STATE_SECRET").then(|| "test=0123456789abcdef0123456789abcdef".to_owned()),
            clock,
        )
        .expect("test settings are valid")
    }
}

/// Parses the authentication settings. Deployed, authentication is required unless
/// `MCP_AUTH_MODE=off` says otherwise, and the shared-secret development mode is refused.
fn auth_config(
    deployed: bool,
    var: &dyn Fn(&str) -> Option<String>,
    clock: Arc<dyn Clock>,
) -> Result<AuthConfig, Vec<String>> {
    let mut problems = Vec::new();
    let has_keys = ["MCP_JWKS", "MCP_JWKS_URL", "MCP_AUTH_HS256_SECRET"].iter().any(|v| var(v).is_some());
    let mode = match var("MCP_AUTH_MODE").as_deref().map(str::trim) {
        Some("required") => AuthMode::Required,
        Some("optional") => AuthMode::Optional,
        Some("off") => AuthMode::Off,
        None if deployed || has_keys => AuthMode::Required,
        None => AuthMode::Off,
        Some(_) => {
            problems.push("MCP_AUTH_MODE must be required, optional or off".to_owned());
            AuthMode::Off
        }
    };
    // A production URL is public (Deployment Protection covers previews by default), so `off`
    // there would hand every tool, the sandbox's included, to anyone who finds it.
    // A deployment that does not say which environment it is (a project that does not expose
    // Vercel's system variables) may be production, and is taken as production.
    let environment = var("VERCEL_TARGET_ENV").or_else(|| var("VERCEL_ENV"));
    let environment = environment.as_deref().map(str::trim);
    if deployed && mode == AuthMode::Off && matches!(environment, None | Some("production")) {
        problems.push(format!(
            "MCP_AUTH_MODE=off is refused on a production deployment{}: every caller would be the same anonymous \
             principal, with every tool. Fix: configure an authorization server ({}), or keep `off` to a preview \
             behind Deployment Protection",
            if environment.is_none() {
                " (neither VERCEL_TARGET_ENV nor VERCEL_ENV is set, so this one may be production; expose the \
                 system environment variables in the project's settings)"
            } else {
                ""
            },
            set_with("MCP_JWKS_URL", "its JWKS URL, with MCP_AUTH_ISSUER and MCP_RESOURCE_URL")
        ));
    }
    let resource_raw = var(RESOURCE_URL_ENV);
    if deployed && mode != AuthMode::Off && resource_raw.is_none() {
        problems.push(format!(
            "{RESOURCE_URL_ENV} is required when deployed with authentication. Fix: {}",
            set_with(RESOURCE_URL_ENV, "the URL clients call, e.g. https://<project>.vercel.app/api/mcp")
        ));
    }
    // Unset, the local run's resource is its own address: `PORT` moves it, and with it the
    // metadata's `resource` and the audience tokens must name. (Deployed, it is required above,
    // or unused with authentication off.)
    let local_resource = var("PORT")
        .filter(|_| !deployed)
        .and_then(|port| port.trim().parse::<u16>().ok())
        .filter(|port| *port != 0)
        .map(|port| format!("http://localhost:{port}/api/mcp"));
    let resource =
        CanonicalResource::resolve(resource_raw.as_deref().or(local_resource.as_deref())).unwrap_or_else(|problem| {
            problems.push(problem);
            CanonicalResource::resolve(None).expect("the default resource parses")
        });
    let list = |name: &str| -> Vec<String> { var(name).as_deref().map(listed).unwrap_or_default() };
    // Trimmed: an `iss` never ends in white space, and one pasted with a line end refused every token.
    let issuer = var("MCP_AUTH_ISSUER").map(|issuer| issuer.trim().to_owned()).unwrap_or_default();
    let mut algorithms = Vec::new();
    for name in list("MCP_AUTH_ALGORITHMS") {
        match name.parse::<Algorithm>() {
            Ok(alg) if !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) => algorithms.push(alg),
            _ => problems.push(format!("MCP_AUTH_ALGORITHMS: {name} is not an accepted asymmetric algorithm")),
        }
    }
    if algorithms.is_empty() {
        algorithms = vec![Algorithm::RS256, Algorithm::ES256];
    }
    let keys = match (var("MCP_JWKS"), var("MCP_JWKS_URL"), var("MCP_AUTH_HS256_SECRET")) {
        (Some(jwks), None, None) => match parse_jwks(jwks.as_bytes()) {
            Ok(keys) => Some(KeySource::Inline(Arc::new(keys))),
            Err(problem) => {
                problems.push(format!("MCP_JWKS: {problem}"));
                None
            }
        },
        (None, Some(url), None) => {
            if !crate::outbound::encrypted_or_loopback(&url) {
                problems.push("MCP_JWKS_URL must be an https URL".to_owned());
            }
            let ttl = bounded_number(
                "MCP_JWKS_CACHE_SECONDS",
                var("MCP_JWKS_CACHE_SECONDS"),
                300,
                30..=86_400,
                &mut problems,
            );
            Some(KeySource::Url(Arc::new(JwksCache::new(
                url,
                Duration::from_secs(ttl),
                Duration::from_secs(30),
                clock,
            ))))
        }
        (None, None, Some(secret)) if deployed => {
            let _ = secret;
            problems.push("MCP_AUTH_HS256_SECRET is for local development only and is refused when deployed; use MCP_JWKS or MCP_JWKS_URL".to_owned());
            None
        }
        (None, None, Some(secret)) => {
            if secret.len() < 32 {
                problems.push("MCP_AUTH_HS256_SECRET must be at least 32 bytes".to_owned());
            }
            algorithms = vec![Algorithm::HS256];
            Some(KeySource::DevSecret(jsonwebtoken::DecodingKey::from_secret(secret.as_bytes())))
        }
        (None, None, None) => None,
        _ => {
            problems.push("set only one of MCP_JWKS, MCP_JWKS_URL and MCP_AUTH_HS256_SECRET".to_owned());
            None
        }
    };
    if mode != AuthMode::Off {
        if keys.is_none() && !has_keys {
            problems.push(format!(
                "authentication is on but no keys are configured: MCP_JWKS_URL (or MCP_JWKS) is missing. Fix: {}; \
                 or, for a private demo behind Deployment Protection only, {}",
                set_with("MCP_JWKS_URL", "your authorization server's JWKS URL"),
                set_with("MCP_AUTH_MODE", "off")
            ));
        }
        if issuer.is_empty() {
            problems.push(format!(
                "MCP_AUTH_ISSUER is required when authentication is on. Fix: {}",
                set_with("MCP_AUTH_ISSUER", "the exact `iss` of your authorization server")
            ));
        }
    }
    let max_lifetime_secs = bounded_number(
        "MCP_AUTH_MAX_LIFETIME_SECONDS",
        var("MCP_AUTH_MAX_LIFETIME_SECONDS"),
        3600,
        60..=86_400,
        &mut problems,
    );
    let authorization_servers = {
        let listed = list("MCP_AUTH_SERVERS");
        if listed.is_empty() && !issuer.is_empty() { vec![issuer.clone()] } else { listed }
    };
    let client_credentials =
        switch("MCP_AUTH_CLIENT_CREDENTIALS", var("MCP_AUTH_CLIENT_CREDENTIALS"), false, &mut problems);
    let mut scopes = |name: &str| var(name).map(|value| scope_list(name, value, &mut problems)).unwrap_or_default();
    let route_scopes = scopes("MCP_AUTH_SCOPES");
    let mut scopes_supported = scopes("MCP_AUTH_SCOPES_SUPPORTED");
    let scopes_supported_configured = !scopes_supported.is_empty();
    if !scopes_supported_configured {
        scopes_supported = route_scopes.clone();
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(AuthConfig {
        mode,
        resource,
        issuer,
        algorithms,
        keys,
        max_lifetime_secs,
        route_scopes,
        authorization_servers,
        scopes_supported,
        scopes_supported_configured,
        client_credentials,
    })
}

/// A whole-number variable within `range`: unset means `default`; anything else is a problem.
fn bounded_number(
    name: &str,
    value: Option<String>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    problems: &mut Vec<String>,
) -> u64 {
    match value.as_deref().map(str::trim).map(str::parse::<u64>) {
        None => default,
        Some(Ok(n)) if range.contains(&n) => n,
        Some(_) => {
            problems.push(format!("{name} must be an integer from {} to {}", range.start(), range.end()));
            default
        }
    }
}

/// An `on`/`off` variable: unset means `default`; anything else is a problem (and `default`).
fn switch(name: &str, value: Option<String>, default: bool, problems: &mut Vec<String>) -> bool {
    match value.as_deref().map(str::trim) {
        None => default,
        Some("on") => true,
        Some("off") => false,
        Some(_) => {
            problems.push(format!("{name} must be on or off"));
            default
        }
    }
}

/// How to set a missing variable on Vercel: the command, the value it wants, and the redeploy
/// that picks it up (a variable changes nothing in deployments made before it).
fn set_with(name: &str, value: &str) -> String {
    format!("run `vercel env add {name}` with {value}, then redeploy (`vercel deploy`)")
}

fn ephemeral_sealer(clock: Arc<dyn Clock>) -> Sealer {
    use ring::rand::SecureRandom;
    let mut secret = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut secret).expect("the OS random source works");
    let id = format!("eph{}", derived_key_id(&secret));
    Sealer::new(vec![(id, secret.to_vec())], clock).expect("a fresh 32-byte key is valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::from_lookup(|k| map.get(k).cloned(), Arc::new(SystemClock))
    }

    /// Unset, the local run's resource URL follows `PORT` (a token for the default port is for
    /// another server); set, or deployed, `PORT` does not move it.
    #[test]
    fn the_local_resource_url_follows_port_unless_set() {
        let resource = |vars: &[(&str, &str)]| load(vars).unwrap().auth.config().resource.url().to_owned();
        assert_eq!(resource(&[]), "http://localhost:3000/api/mcp");
        assert_eq!(resource(&[("PORT", "4100")]), "http://localhost:4100/api/mcp");
        assert_eq!(resource(&[("PORT", "")]), "http://localhost:3000/api/mcp", "set to nothing is unset");
        assert_eq!(
            resource(&[("PORT", "4100"), ("MCP_RESOURCE_URL", "http://127.0.0.1:9000/api/mcp")]),
            "http://127.0.0.1:9000/api/mcp"
        );
        let secret = "0123456789abcdef".repeat(2);
        let deployed = [
            ("VERCEL", "1"),
            ("VERCEL_ENV", "preview"),
            ("PORT", "4100"),
            ("MCP_AUTH_MODE", "off"),
            ("MCP_STATE_SECRET", &secret),
        ];
        assert_eq!(resource(&deployed), "http://localhost:3000/api/mcp", "deployed, PORT is the platform's");
    }

    #[test]
    fn local_run_generates_an_ephemeral_key() {
        let config = load(&[]).unwrap();
        assert!(!config.deployed && config.ephemeral_secret);
        assert!(config.sealer.current_key_id().starts_with("eph"));
    }

    #[test]
    fn deployed_without_a_secret_refuses_to_start() {
        // Under the platform's runtime, whether or not the project exposes `VERCEL`.
        let error = load(&[("VERCEL_IPC_PATH", "/tmp/ipc.sock")]).unwrap_err().to_string();
        assert!(error.contains("MCP_STATE_SECRET is required when deployed"), "{error}");
        let error = load(&[("VERCEL", "1")]).unwrap_err();
        assert!(error.0.iter().any(|p| p.contains("MCP_STATE_SECRET")));
    }

    #[test]
    fn a_bare_deployment_names_each_variable_and_the_command_that_sets_it() {
        let error = load(&[("VERCEL", "1")]).unwrap_err().to_string();
        for variable in ["MCP_STATE_SECRET", "MCP_RESOURCE_URL", "MCP_JWKS_URL", "MCP_AUTH_ISSUER"] {
            assert!(error.contains(&format!("`vercel env add {variable}`")), "{variable} in {error}");
        }
        assert!(error.contains("`vercel env add MCP_AUTH_MODE` with off"), "{error}");
        assert!(error.contains("openssl rand -hex 32"), "{error}");
        // The private-demo posture needs only the secret, on a preview.
        let demo = [("VERCEL", "1"), ("MCP_AUTH_MODE", "off"), ("MCP_STATE_SECRET", &"0123456789abcdef".repeat(2))];
        // A deployment that does not say which environment it is may be production.
        let unknown = load(&demo).unwrap_err().to_string();
        assert!(
            unknown.contains("refused on a production deployment (neither VERCEL_TARGET_ENV nor VERCEL_ENV is set"),
            "{unknown}"
        );
        for environment in ["VERCEL_ENV", "VERCEL_TARGET_ENV"] {
            let preview = [demo.as_slice(), &[(environment, "preview")]].concat();
            assert!(load(&preview).is_ok(), "{environment}=preview");
            let production = [demo.as_slice(), &[(environment, "production")]].concat();
            let refused = load(&production).unwrap_err().to_string();
            assert!(refused.contains("MCP_AUTH_MODE=off is refused on a production deployment"), "{refused}");
        }
        // The target, when set, decides (a custom environment is not production).
        let staging = [demo.as_slice(), &[("VERCEL_TARGET_ENV", "staging"), ("VERCEL_ENV", "production")]].concat();
        assert!(load(&staging).is_ok());
        let local = load(&[("MCP_AUTH_MODE", "off"), ("VERCEL_ENV", "production")]);
        assert!(local.is_ok(), "off Vercel, nothing is deployed");
    }

    /// A job step longer than a delivery's whole budget could never be taken, and steps so long
    /// that the longest job's work passes half its deadline would have long jobs accepted and then
    /// always fail: both refused at start, locally and deployed alike.
    #[test]
    fn a_job_step_must_fit_in_a_delivery_and_the_longest_job_in_its_deadline() {
        let budget =
            |step: &str, seconds: &str| load(&[("MCP_JOB_STEP_MS", step), ("MCP_CONSUMER_BUDGET_SECONDS", seconds)]);
        let refused = budget("5000", "5").unwrap_err().to_string();
        assert!(refused.contains("MCP_JOB_STEP_MS is 5000 ms but") && refused.contains("below 5000"), "{refused}");
        assert!(budget("4999", "5").is_ok());
        let refused = load(&[("MCP_JOB_STEP_MS", "18000")]).unwrap_err().to_string();
        assert!(refused.contains("a job of 100 steps would work 1800 s, more than half of the 1800 s"), "{refused}");
        assert!(refused.contains("set it to at most 9000 ms"), "{refused}");
        assert!(load(&[("MCP_JOB_STEP_MS", "9001")]).is_err());
        assert!(load(&[("MCP_JOB_STEP_MS", "9000")]).is_ok());
    }

    #[test]
    fn reports_every_problem_without_echoing_secrets() {
        let error = load(&[("MCP_STATE_SECRET", "tooshort-secret"), ("MCP_MAX_BODY_BYTES", "lots")]).unwrap_err();
        assert_eq!(error.0.len(), 2);
        assert!(!error.to_string().contains("tooshort-secret"));
    }

    #[test]
    fn switches_take_on_or_off_and_name_themselves_otherwise() {
        let error =
            load(&[("MCP_REQUEST_STATE_SINGLE_USE", "yes"), ("MCP_AUTH_CLIENT_CREDENTIALS", "true")]).unwrap_err();
        let text = error.to_string();
        assert_eq!(error.0.len(), 2, "{text}");
        assert!(text.contains("MCP_REQUEST_STATE_SINGLE_USE must be on or off"), "{text}");
        assert!(text.contains("MCP_AUTH_CLIENT_CREDENTIALS must be on or off"), "{text}");
        assert!(load(&[("MCP_REQUEST_STATE_SINGLE_USE", " off "), ("MCP_AUTH_CLIENT_CREDENTIALS", "on")]).is_ok());
    }

    #[test]
    fn every_request_is_logged_unless_told_failures() {
        use crate::observe::RequestLines;
        assert_eq!(load(&[]).unwrap().request_lines, RequestLines::All);
        assert_eq!(load(&[("MCP_REQUEST_LOG", "all")]).unwrap().request_lines, RequestLines::All);
        assert_eq!(load(&[("MCP_REQUEST_LOG", " failures ")]).unwrap().request_lines, RequestLines::Failures);
        for wrong in ["none", "Failures", "errors", "0"] {
            let error = load(&[("MCP_REQUEST_LOG", wrong)]).unwrap_err().to_string();
            assert!(error.contains("MCP_REQUEST_LOG must be all or failures"), "{wrong}: {error}");
        }
    }

    #[test]
    fn the_seal_format_is_v2_unless_told_v1() {
        use crate::state::Purpose;
        let version = |vars: &[(&str, &str)]| {
            let sealed = load(vars).unwrap().sealer.seal(Purpose::JobHandle, b"p", 1_000, serde_json::json!("x"));
            sealed[..3].to_owned()
        };
        assert_eq!(version(&[]), "v2.");
        assert_eq!(version(&[("MCP_SEAL_FORMAT", " v1 ")]), "v1.");
        assert_eq!(version(&[("MCP_SEAL_FORMAT", "v2")]), "v2.");
        let error = load(&[("MCP_SEAL_FORMAT", "v3")]).unwrap_err().to_string();
        assert!(error.contains("MCP_SEAL_FORMAT must be v1 or v2"), "{error}");
    }

    #[test]
    fn a_deployment_refuses_durations_its_functions_cannot_finish() {
        let deployed = [("VERCEL", "1"), ("VERCEL_ENV", "preview"), ("MCP_AUTH_MODE", "off")];
        let secret = "0123456789abcdef".repeat(2);
        let with = |extra: &[(&str, &str)]| {
            let mut vars = deployed.to_vec();
            vars.push(("MCP_STATE_SECRET", &secret));
            vars.extend_from_slice(extra);
            load(&vars)
        };
        let mcp = max_duration_seconds("api/mcp.rs").expect("vercel.json sets api/mcp.rs's maxDuration");
        let consumer = max_duration_seconds("api/queues/process-job.rs").expect("and the consumer's");
        let fits = (mcp - LISTEN_CLOSE_MARGIN_SECONDS).to_string();
        let too_long = (mcp - LISTEN_CLOSE_MARGIN_SECONDS + 1).to_string();
        let budget_fits = (consumer - CONSUMER_DEFER_MARGIN_SECONDS).to_string();
        let budget_too_long = consumer.to_string();

        assert!(with(&[("MCP_LISTEN_MAX_SECONDS", &fits), ("MCP_CONSUMER_BUDGET_SECONDS", &budget_fits)]).is_ok());
        let error = with(&[("MCP_LISTEN_MAX_SECONDS", &too_long), ("MCP_CONSUMER_BUDGET_SECONDS", &budget_too_long)])
            .unwrap_err();
        let text = error.to_string();
        assert_eq!(error.0.len(), 2, "{text}");
        assert!(
            text.contains(&format!("MCP_LISTEN_MAX_SECONDS is {too_long} s but api/mcp.rs may run {mcp} s")),
            "{text}"
        );
        assert!(text.contains(&format!("set MCP_LISTEN_MAX_SECONDS to at most {fits} s")), "{text}");
        assert!(text.contains(&format!("set MCP_CONSUMER_BUDGET_SECONDS to at most {budget_fits} s")), "{text}");
        // A task round must leave time to record its failure, as a listen stream to close.
        let round_fits = (mcp - TASK_FAILURE_MARGIN_SECONDS).to_string();
        let round_too_long = (mcp - TASK_FAILURE_MARGIN_SECONDS + 1).to_string();
        assert_eq!(
            with(&[("MCP_TASK_ROUND_SECONDS", &round_fits)]).unwrap().task_round_limit.as_secs().to_string(),
            round_fits
        );
        let text = with(&[("MCP_TASK_ROUND_SECONDS", &round_too_long)]).unwrap_err().to_string();
        assert!(text.contains(&format!("set MCP_TASK_ROUND_SECONDS to at most {round_fits} s")), "{text}");
        assert_eq!(with(&[]).unwrap().task_round_limit, crate::tasks::DEFAULT_ROUND_LIMIT, "the default fits");
        // Locally nothing cuts a function off, so the same settings start.
        let local = [("MCP_LISTEN_MAX_SECONDS", "3600"), ("MCP_CONSUMER_BUDGET_SECONDS", "800")];
        assert!(load(&local).is_ok());
        assert_eq!(load(&[("MCP_TASK_ROUND_SECONDS", "3590")]).unwrap().task_round_limit.as_secs(), 3590);
        // But nowhere may a round outlive its task's record (an hour), its outcome unwritten.
        let text = load(&[("MCP_TASK_ROUND_SECONDS", "3591")]).unwrap_err().to_string();
        assert!(text.contains("MCP_TASK_ROUND_SECONDS is 3591 s") && text.contains("at most 3590 s"), "{text}");
    }

    /// Deployed, Redis beyond this machine is spoken to over TLS unless the operator says the link
    /// is private; the refusal never quotes the URL, which holds the password.
    #[test]
    fn a_deployment_speaks_tls_to_a_remote_redis() {
        let secret = "0123456789abcdef".repeat(2);
        let deployed = |redis: &str, extra: &[(&str, &str)]| {
            let mut vars = vec![("VERCEL", "1"), ("VERCEL_ENV", "preview"), ("MCP_AUTH_MODE", "off")];
            vars.extend_from_slice(&[("MCP_STATE_SECRET", &secret), ("REDIS_URL", redis)]);
            vars.extend_from_slice(extra);
            load(&vars)
        };
        let text = deployed("redis://default:hunter2@redis.example.com:6379", &[]).unwrap_err().to_string();
        assert!(text.contains("REDIS_URL is redis://") && text.contains("MCP_REDIS_ALLOW_PLAINTEXT"), "{text}");
        assert!(!text.contains("hunter2") && !text.contains("redis.example.com"), "{text}");
        for fine in ["rediss://default:pw@redis.example.com:6379", "redis://127.0.0.1:6379", "redis://localhost:6379/2"]
        {
            assert!(deployed(fine, &[]).is_ok(), "{fine}");
        }
        assert!(deployed("redis://default:pw@10.0.0.7:6379", &[("MCP_REDIS_ALLOW_PLAINTEXT", "on")]).is_ok());
        let junk = load(&[("MCP_REDIS_ALLOW_PLAINTEXT", "yes")]).unwrap_err().to_string();
        assert!(junk.contains("MCP_REDIS_ALLOW_PLAINTEXT must be on or off"), "{junk}");
        assert!(load(&[("REDIS_URL", "redis://redis.example.com:6379")]).is_ok(), "locally it is the operator's call");
    }

    /// Unset, the key prefix keeps deployments apart: production's is `mcp`, any other
    /// environment's `mcp:<environment>`; locally it is `mcp`, and a set prefix always wins.
    #[test]
    fn each_environment_keeps_its_own_keys_by_default() {
        let secret = "0123456789abcdef".repeat(2);
        let prefix = |vars: &[(&str, &str)]| {
            let mut all = vec![("MCP_STATE_SECRET", secret.as_str()), ("REDIS_URL", "redis://127.0.0.1:6379")];
            all.extend_from_slice(vars);
            load(&all).unwrap().redis.unwrap().prefix
        };
        let required = [
            ("MCP_AUTH_MODE", "required"),
            ("MCP_JWKS_URL", "https://issuer.test/jwks"),
            ("MCP_AUTH_ISSUER", "https://issuer.test"),
            ("MCP_RESOURCE_URL", "https://mcp.test/api/mcp"),
        ];
        let deployed = |environment: (&'static str, &'static str)| {
            let mut vars = vec![("VERCEL", "1"), environment];
            vars.extend_from_slice(&required);
            prefix(&vars)
        };
        assert_eq!(deployed(("VERCEL_ENV", "production")), "mcp");
        assert_eq!(deployed(("VERCEL_ENV", "preview")), "mcp:preview");
        assert_eq!(deployed(("VERCEL_TARGET_ENV", "Staging Two")), "mcp:staging-two");
        assert_eq!(prefix(&[("VERCEL_ENV", "preview")]), "mcp", "not deployed");
        let mut named = vec![("VERCEL", "1"), ("VERCEL_ENV", "preview"), ("MCP_REDIS_PREFIX", "mine")];
        named.extend_from_slice(&required);
        assert_eq!(prefix(&named), "mine");
    }

    /// A route's scopes are read from `MCP_AUTH_SCOPES_<EXAMPLE>`; a name that is no example's is
    /// reported rather than left to do nothing.
    #[test]
    fn a_misspelt_route_scope_variable_is_reported() {
        let names =
            ["MCP_AUTH_SCOPES_SANDBOX", "MCP_AUTH_SCOPES_SECURE_TOOLS", "MCP_AUTH_SCOPES_SUPPORTED", "MCP_AUTH_SCOPES"];
        let found = unknown_route_scope_variables(names.iter().map(|n| n.to_string()));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("MCP_AUTH_SCOPES_SANDBOX names no example route"), "{found:?}");
        assert!(found[0].contains("MCP_AUTH_SCOPES_SANDBOX_ISOLATION"), "it lists the right names: {found:?}");
    }

    /// The problems of a configuration with keys from a JWKS URL and `extra`; empty when none.
    fn problems_with(extra: &[(&str, &str)]) -> String {
        let mut vars = vec![("MCP_AUTH_MODE", "required"), ("MCP_JWKS_URL", "https://issuer.test/jwks")];
        vars.extend_from_slice(extra);
        load(&vars).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn junk_numbers_are_problems_not_silent_defaults() {
        let with = problems_with;
        let junk = with(&[("MCP_JWKS_CACHE_SECONDS", "soon"), ("MCP_AUTH_MAX_LIFETIME_SECONDS", "59")]);
        assert!(junk.contains("MCP_JWKS_CACHE_SECONDS must be an integer from 30 to 86400"), "{junk}");
        assert!(junk.contains("MCP_AUTH_MAX_LIFETIME_SECONDS must be an integer from 60 to 86400"), "{junk}");
        let fine = with(&[("MCP_JWKS_CACHE_SECONDS", " 600 "), ("MCP_AUTH_MAX_LIFETIME_SECONDS", "60")]);
        assert!(!fine.contains("MCP_JWKS_CACHE_SECONDS") && !fine.contains("MCP_AUTH_MAX_LIFETIME_SECONDS"), "{fine}");
    }

    /// Scopes are written into `WWW-Authenticate`: one that would break the header (a quote, a
    /// backslash, a character outside printable ASCII) is a problem at start-up, in each variable
    /// that lists scopes, rather than a 401 sent without its challenge.
    #[test]
    fn scopes_that_would_break_a_challenge_are_problems() {
        let with = problems_with;
        for name in ["MCP_AUTH_SCOPES", "MCP_AUTH_SCOPES_SUPPORTED", "MCP_AUTH_SCOPES_ASYNC_JOBS"] {
            for bad in ["mcp:read \"x\"", "mcp:réad", "a\\b"] {
                let problems = with(&[(name, bad)]);
                assert!(
                    problems.contains(&format!("{name} must list scopes of printable ASCII")),
                    "{name}={bad}: {problems}"
                );
            }
            let fine = with(&[(name, "mcp:read, items:write openid")]);
            assert!(!fine.contains(name), "{name}: {fine}");
        }
    }

    /// A variable set to nothing is unset, numbers included: a copy of `.env.example` (every
    /// variable listed empty) starts with the defaults. Values that end in white space are trimmed
    /// where a stray line end would refuse everything.
    #[test]
    fn empty_variables_are_unset_and_pasted_values_are_trimmed() {
        let copied = load(&[
            ("MCP_MAX_BODY_BYTES", ""),
            ("MCP_JOB_CAP_VERIFIED", " "),
            ("MCP_SERVER_NAME", "  "),
            ("MCP_ALLOWED_ORIGINS", ""),
            ("MCP_AUTH_MODE", ""),
        ])
        .unwrap();
        assert_eq!(copied.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
        assert_eq!(copied.server_name, "vercel-mcp");
        assert_eq!(copied.job_limits.verified, crate::jobs::service::JobLimits::default().verified);
        let pasted = load(&[
            ("MCP_AUTH_MODE", "required"),
            ("MCP_JWKS_URL", "https://issuer.test/jwks"),
            ("MCP_AUTH_ISSUER", "https://issuer.test\n"),
            ("CRON_SECRET", " s3cret\r\n"),
        ])
        .unwrap();
        assert_eq!(pasted.auth.config().issuer, "https://issuer.test");
        assert_eq!(pasted.cron_secret.as_deref(), Some("s3cret"));
    }

    #[test]
    fn the_queue_follows_the_posture_and_the_setting() {
        let name = |vars: &[(&str, &str)]| load(vars).map(|settings| settings.queue.name());
        let redis = ("REDIS_URL", "redis://127.0.0.1:6379");
        assert_eq!(name(&[]), Ok("in-process queue"));
        assert_eq!(name(&[redis]), Ok("Redis Streams"), "off Vercel with Redis, the stream by default");
        assert_eq!(name(&[redis, ("MCP_QUEUE", "local")]), Ok("in-process queue"));
        assert_eq!(name(&[("MCP_QUEUE_BASE_URL", "http://127.0.0.1:9")]), Ok("Vercel Queues"), "a stand-in");
        let deployed = [
            ("VERCEL", "1"),
            ("VERCEL_ENV", "preview"),
            ("MCP_AUTH_MODE", "off"),
            ("MCP_STATE_SECRET", &"0123456789abcdef".repeat(2)),
            redis,
        ];
        assert_eq!(name(&deployed), Ok("Vercel Queues"));
        let refused = |vars: &[(&str, &str)]| load(vars).unwrap_err().to_string();
        // A stand-in receives the project's OIDC token: never in clear beyond this machine.
        for variable in ["MCP_QUEUE_BASE_URL", "MCP_SANDBOX_API_BASE_URL"] {
            for refused_url in ["http://example.com", "http://localhost.example.com:9", "ftp://127.0.0.1", "junk"] {
                let problem = refused(&[(variable, refused_url)]);
                assert!(problem.contains(&format!("{variable} must be an https URL")), "{refused_url}: {problem}");
            }
            for accepted in ["https://queue.example.com", "http://[::1]:9", "http://localhost:9"] {
                assert!(load(&[(variable, accepted)]).is_ok(), "{variable}={accepted}");
            }
        }
        assert!(refused(&[("MCP_QUEUE", "redis")]).contains("MCP_QUEUE=redis needs REDIS_URL"));
        let mut deployed_redis = deployed.to_vec();
        deployed_redis.push(("MCP_QUEUE", "redis"));
        assert!(refused(&deployed_redis).contains("MCP_QUEUE=redis is refused when deployed"));
        deployed_redis.pop();
        deployed_redis.push(("MCP_QUEUE", "local"));
        assert!(refused(&deployed_redis).contains("MCP_QUEUE=local is refused when deployed"));
        assert!(refused(&[("MCP_QUEUE", "kafka")]).contains("MCP_QUEUE must be vercel, redis or local"));
        assert!(refused(&[redis, ("MCP_QUEUE_RECLAIM_IDLE_MS", "5")]).contains("MCP_QUEUE_RECLAIM_IDLE_MS"));
    }
}
