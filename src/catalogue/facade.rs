//! facade-server: one server fronting two backends (weather and directory) behind namespaced
//! tools, with a single choke point, [`Facade::dispatch`].
//!
//! Only [`BackendError`] crosses the boundary. An expected failure (unknown city) passes through
//! as it is; anything else (an unexpected error or a panic) is contained: it is logged with a
//! fresh correlation id through the [`FaultLogger`], and the caller sees only a fixed message
//! carrying that id. The audit trail records which backend and scope were used, never the key
//! or the answer. In-process containment is not isolation: a backend that must not share this
//! process's memory or credentials belongs in its own function or service.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use crate::observe::Logger;
use crate::protocol::types::CallToolResult;
use crate::server::{McpServer, RequestContext, ToolDef, ToolError};
use crate::state::Random;

/// The only error type a backend lookup may return across the boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendError {
    /// What the caller is told.
    pub message: String,
    /// Set when the error stands for a contained fault; the same id is in the fault log.
    pub correlation_id: Option<String>,
}

impl BackendError {
    fn expected(message: impl Into<String>) -> Self {
        Self { message: message.into(), correlation_id: None }
    }
}

/// What a backend's lookup can fail with: an expected error, or a fault to contain.
#[derive(Debug)]
pub enum LookupError {
    /// Passed to the caller unchanged.
    Expected(BackendError),
    /// Logged with a correlation id; the caller sees only [`contained_fault_message`].
    Fault(String),
}

/// One backend behind the facade.
pub trait Backend: Send + Sync + 'static {
    /// Its name (never a tool name on its own).
    fn name(&self) -> &'static str;
    /// The scope label recorded in the audit trail.
    fn scope(&self) -> &'static str;
    /// Looks `key` up.
    fn lookup(&self, key: &str) -> Result<String, LookupError>;
}

/// Weather by city, case-insensitively.
#[derive(Debug)]
pub struct Weather;

impl Backend for Weather {
    fn name(&self) -> &'static str {
        "weather"
    }
    fn scope(&self) -> &'static str {
        "weather:read"
    }
    fn lookup(&self, city: &str) -> Result<String, LookupError> {
        match city.to_lowercase().as_str() {
            "london" => Ok("rain".into()),
            "tokyo" => Ok("clear".into()),
            "cairo" => Ok("hot".into()),
            _ => Err(LookupError::Expected(BackendError::expected("unknown city"))),
        }
    }
}

/// The input that makes the directory backend fail unexpectedly, to show containment.
pub const FAULT_SENTINEL: &str = "__boom__";

/// E-mail addresses by person, case-insensitively.
#[derive(Debug)]
pub struct Directory;

impl Backend for Directory {
    fn name(&self) -> &'static str {
        "directory"
    }
    fn scope(&self) -> &'static str {
        "directory:read"
    }
    fn lookup(&self, person: &str) -> Result<String, LookupError> {
        match person.to_lowercase().as_str() {
            "alice" => Ok("alice@example.com".into()),
            "bob" => Ok("bob@example.com".into()),
            FAULT_SENTINEL => panic!("simulated uncaught backend fault"),
            _ => Err(LookupError::Expected(BackendError::expected("unknown person"))),
        }
    }
}

/// One contained fault, for the server's logs only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultLogEntry {
    /// The id the caller was given.
    pub correlation_id: String,
    /// The backend that failed.
    pub backend: &'static str,
    /// Its scope label.
    pub scope: &'static str,
    /// The fault's own message (a panic's literal message; formatted ones are withheld).
    pub detail: String,
    /// Where it happened (`file:line: message` for a panic).
    pub stack: Option<String>,
}

/// Where contained faults are reported.
pub trait FaultLogger: Send + Sync + 'static {
    /// Records one fault.
    fn log_fault(&self, entry: &FaultLogEntry);
}

/// Where each dispatch is recorded (backend and scope only).
pub trait AuditLog: Send + Sync + 'static {
    /// Records one dispatch.
    fn record(&self, backend: &'static str, scope: &'static str);
}

/// Faults and audit entries as structured log lines, which a log drain ships off-platform.
#[derive(Clone)]
pub struct LogLines(pub Logger);

impl FaultLogger for LogLines {
    fn log_fault(&self, entry: &FaultLogEntry) {
        self.0.event(
            "error",
            "facade_fault",
            json!({ "correlationId": entry.correlation_id, "backend": entry.backend, "scope": entry.scope,
                    "detail": entry.detail, "stack": entry.stack }),
        );
    }
}

impl AuditLog for LogLines {
    fn record(&self, backend: &'static str, scope: &'static str) {
        self.0.event("info", "facade_audit", json!({ "backend": backend, "scope": scope }));
    }
}

/// The caller-facing text of a contained fault: nothing from the fault itself.
pub fn contained_fault_message(backend: &str, correlation_id: &str) -> String {
    format!("backend \"{backend}\" failed; see server logs for correlation id {correlation_id}")
}

/// A random (version 4) UUID.
fn uuid_v4(random: &dyn Random) -> String {
    let mut b = [0u8; 16];
    random.fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// The choke point: every tool goes through [`Facade::dispatch`].
pub struct Facade {
    backends: Vec<Arc<dyn Backend>>,
    audit: Arc<dyn AuditLog>,
    faults: Arc<dyn FaultLogger>,
    random: Arc<dyn Random>,
}

impl Facade {
    /// A facade over the weather and directory backends.
    pub fn new(audit: Arc<dyn AuditLog>, faults: Arc<dyn FaultLogger>, random: Arc<dyn Random>) -> Self {
        Self { backends: vec![Arc::new(Weather), Arc::new(Directory)], audit, faults, random }
    }

    /// The backends' names.
    pub fn backend_names(&self) -> Vec<&'static str> {
        self.backends.iter().map(|b| b.name()).collect()
    }

    /// Looks `key` up in the backend `name`: unknown backends are refused before anything is
    /// recorded; expected errors pass through; faults and panics are contained.
    pub fn dispatch(&self, name: &str, key: &str) -> Result<String, BackendError> {
        let Some(backend) = self.backends.iter().find(|b| b.name() == name) else {
            return Err(BackendError::expected(format!(
                "unknown backend: \"{}\"",
                crate::protocol::error::truncate_for_message(name)
            )));
        };
        self.audit.record(backend.name(), backend.scope());
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| backend.lookup(key)));
        let (detail, stack) = match outcome {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(LookupError::Expected(error))) => return Err(error),
            Ok(Err(LookupError::Fault(detail))) => (detail, None),
            Err(payload) => {
                let detail = payload.downcast_ref::<&'static str>().map_or("<formatted message withheld>", |m| m);
                (detail.to_owned(), crate::observe::take_panic_location())
            }
        };
        let correlation_id = uuid_v4(self.random.as_ref());
        self.faults.log_fault(&FaultLogEntry {
            correlation_id: correlation_id.clone(),
            backend: backend.name(),
            scope: backend.scope(),
            detail,
            stack,
        });
        Err(BackendError {
            message: contained_fault_message(backend.name(), &correlation_id),
            correlation_id: Some(correlation_id),
        })
    }
}

/// Arguments of `weather_get`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WeatherArgs {
    /// The city, up to 100 characters.
    #[schemars(length(max = 100))]
    pub city: String,
}

/// Arguments of `directory_lookup`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DirectoryArgs {
    /// The person, up to 100 characters.
    #[schemars(length(max = 100))]
    pub person: String,
}

fn answer(result: Result<String, BackendError>) -> Result<CallToolResult, ToolError> {
    result.map(CallToolResult::text).map_err(|e| ToolError::Execution(e.message))
}

/// Registers `weather_get` and `directory_lookup` over `facade`.
pub fn register(server: &mut McpServer, facade: Arc<Facade>) {
    server
        .with_state(facade)
        .tool(
            ToolDef::new("weather_get")
                .description("Current weather for a city, from the weather backend.")
                .scopes(&[super::READ_SCOPE]),
            |_: RequestContext, facade: Arc<Facade>, args: WeatherArgs| async move {
                answer(facade.dispatch("weather", &args.city))
            },
        )
        .tool(
            ToolDef::new("directory_lookup")
                .description("A person's e-mail address, from the directory backend.")
                .scopes(&[super::READ_SCOPE]),
            |_: RequestContext, facade: Arc<Facade>, args: DirectoryArgs| async move {
                answer(facade.dispatch("directory", &args.person))
            },
        );
}
