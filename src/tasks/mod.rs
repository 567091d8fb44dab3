//! The tasks extension (`io.modelcontextprotocol/tasks`): long `tools/call`s answered with a
//! task handle, then observed with `tasks/get`, fed with `tasks/update` and stopped with
//! `tasks/cancel`.
//!
//! Task records live in a [`TaskStore`] (Redis when deployed), so any instance can answer
//! `tasks/get`, take an update or a cancel. The work itself runs on the instance that created
//! the task, and a resumption (after `tasks/update` answers every outstanding input) runs on the
//! instance that received the update; a running task waits for its change on the change bus (and
//! reads its record every few seconds, for a change the bus lost) and stops as soon as a cancel
//! lands anywhere. A task left working by a round that was lost (its instance stopped) is failed
//! by the next read of it past that round's limit. Work that must outlive an invocation belongs in the jobs queue.

pub mod store;

pub use store::{
    MemoryTaskStore, RedisTaskStore, TaskQuota, TaskRecord, TaskRefused, TaskStatus, TaskStore, UnconfiguredTaskStore,
    task_store,
};

use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

use crate::handler::{Outcome, RequestContext, ToolError, ToolFn, ToolResult, catch_unwind};
use crate::protocol::{Era, McpError, RequestId, TASKS_EXTENSION};
use crate::security::{Principal, Slot, SlotCaps, Slots};
use crate::state::clock::iso8601;
use crate::state::{ChangeBus, ChangeEvent, Clock, Random};
use crate::store::{StoreError, StoreErrorKind};
use crate::telemetry::SpanHandle;

/// How long a task (and its result) stays retrievable.
pub const TASK_TTL_MS: u64 = 60 * 60 * 1000;
/// Suggested polling interval.
pub const POLL_INTERVAL_MS: u64 = 1000;
/// How often running work reads its record for a cancel when the bus announced none: a cancel
/// is announced on the change bus, which wakes the work at once, so this read only finds one the
/// bus lost (its publisher's link to the other instances failed). Each read is the whole record,
/// up to `MAX_TASK_RECORD_BYTES`.
const CANCEL_POLL: Duration = Duration::from_secs(5);
/// How long after its round's limit a task that still reads as working is taken as lost and
/// failed (by the next `tasks/get` or notification of it): its round would have failed it at
/// the limit, so by then its instance stopped or its outcome could not be stored. The margin
/// covers that outcome's own retries and the clocks of two instances disagreeing.
const LOST_ROUND_MARGIN: Duration = Duration::from_secs(60);

/// A task as a listen stream sees it ([`TaskService::watched`]).
#[derive(Debug)]
pub struct Watched {
    /// The `notifications/tasks` params.
    pub params: Map<String, Value>,
    /// While it is working: how long until it would count as lost.
    pub lost_in: Option<Duration>,
}

/// Tasks one caller, and one instance, may have running at once by default: each runs its
/// handler here and watches for a cancel until it ends.
pub const DEFAULT_TASK_CAPS: SlotCaps = SlotCaps { per_principal: 8, total: 128 };
/// `tasks/update`s one caller, and one instance, may have in flight at once: each is a store
/// read and a compare-and-set, done within the store's timeouts.
pub const UPDATE_CAPS: SlotCaps = SlotCaps { per_principal: 8, total: 256 };
/// The most one task record may hold, serialised: its arguments, the capabilities of the
/// request that created it, the answers it was given, its result. With the records one caller
/// may hold (`MCP_TASK_SHARE`, 500) it bounds what a caller keeps in the shared store (125 MiB);
/// without it each record could grow by a request body (1 MiB) with every answer.
pub const MAX_TASK_RECORD_BYTES: usize = 256 * 1024;
/// How many times a finished round's outcome is offered to the store, pausing 200 ms, then twice
/// as long each time (about 3 s in all), before it is given up and logged: a store that blips
/// loses no result.
const SETTLE_ATTEMPTS: u32 = 5;
/// How many rounds in a row a task's work may hand back only its state before the task fails:
/// each such round runs the next at once, so a handler that never moves on would spin.
const STATE_ONLY_ROUNDS: u32 = 32;
const SETTLE_FIRST_PAUSE: Duration = Duration::from_millis(200);

/// Whether and how a tool runs as a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskSupport {
    /// Always synchronous.
    #[default]
    Forbidden,
    /// A task when the request declares the extension, synchronous otherwise.
    Optional,
    /// Only as a task: a request without the extension gets `-32021`.
    Required,
}

/// The `-32021` for a request that needs the tasks extension but did not declare it.
pub fn extension_required() -> McpError {
    McpError::missing_capability(
        "This request requires the io.modelcontextprotocol/tasks extension",
        json!({ "extensions": { TASKS_EXTENSION: {} } }),
    )
}

/// Whether `id` has the shape of the ids this server mints (22 base64url characters). Any other
/// names no task, and is answered as one that does not exist without a store read: a caller
/// cannot make the store look up keys of any length it likes.
pub fn is_task_id(id: &str) -> bool {
    id.len() == 22 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn not_found() -> McpError {
    McpError::invalid_params("Failed to retrieve task: Task not found")
}

/// A task updated by others faster than a compare-and-set could land: retryable, not a fault.
fn contention() -> StoreError {
    StoreError::contention("the task is changing too fast; try again")
}

/// Task creation, lookup, updates, cancellation and execution.
pub struct TaskService {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Random>,
    bus: Arc<dyn ChangeBus>,
    logger: Option<crate::observe::Logger>,
    /// The tasks running, per owner: a run holds one from start to end. Shared by every service
    /// the process's parts make (`Parts::task_service`), so the caps hold per instance.
    running: Arc<Slots>,
    caps: SlotCaps,
    /// `tasks/update`s whose store work is in flight, per owner ([`UPDATE_CAPS`]).
    updating: Arc<Slots>,
    quota: TaskQuota,
    round_limit: Duration,
    /// The process is stopping: a running round gets [`ROUND_STOP_GRACE`] to finish.
    stopping: crate::state::Stopping,
    /// Listen streams' reads of their tasks in flight ([`WATCHED_READS_AT_ONCE`], and
    /// [`WATCHED_READS_PER_CALLER`] of them for one caller).
    watching: Arc<crate::security::Turns>,
    /// The endpoint this service serves ([`TaskRecord::endpoint`]): `None` for `/api/mcp`.
    endpoint: Option<String>,
}

/// How many listen-stream reads of tasks ([`TaskService::watched`]) one service makes at once.
/// Each stream reads up to 16 of its tasks together, and an instance may hold hundreds of
/// streams, which all catch up after the change bus reconnects: past this, their reads wait here
/// rather than queue on the store's one connection, in front of every other request's.
pub const WATCHED_READS_AT_ONCE: usize = 64;

/// How many of the [`WATCHED_READS_AT_ONCE`] one caller's streams hold or wait for: its further
/// reads wait behind its own, so one caller's many streams do not put their reads ahead of
/// another caller's at the shared bound.
pub const WATCHED_READS_PER_CALLER: usize = 16;

/// How long a round may go on once its process begins stopping, before the task is recorded
/// as failed for that reason (rather than read as working until its round limit has passed).
pub const ROUND_STOP_GRACE: Duration = Duration::from_secs(5);

/// How long one round of a task's work may run by default: on Vercel a round runs inside the
/// invocation that started it, which `/api/mcp`'s `maxDuration` (300 s) ends, and the round must
/// leave time to record its failure before that.
pub const DEFAULT_ROUND_LIMIT: Duration = Duration::from_secs(280);

/// A task whose inputs are all answered, with the running slot its next round holds.
#[derive(Debug)]
pub struct Resumed {
    /// The task, working again.
    pub record: TaskRecord,
    slot: Slot,
}

/// What a new task starts from.
pub struct NewTask<'a> {
    /// The calling principal.
    pub principal: &'a Principal,
    /// The tool.
    pub tool: &'a str,
    /// Its validated arguments.
    pub arguments: Map<String, Value>,
    /// The capabilities the creating request declared (input requests are gated on them).
    pub client_capabilities: Map<String, Value>,
}

impl TaskService {
    /// A service over `store`, announcing every change on `bus` (for `notifications/tasks`).
    pub fn new(
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
        bus: Arc<dyn ChangeBus>,
    ) -> Self {
        Self {
            store,
            clock,
            random,
            bus,
            logger: None,
            running: Arc::default(),
            caps: DEFAULT_TASK_CAPS,
            updating: Arc::default(),
            quota: TaskQuota::default(),
            round_limit: DEFAULT_ROUND_LIMIT,
            stopping: crate::state::Stopping::default(),
            watching: Arc::new(crate::security::Turns::new(WATCHED_READS_PER_CALLER, WATCHED_READS_AT_ONCE)),
            endpoint: None,
        }
    }

    /// Serves the endpoint at `path` (`/api/examples/<name>`) rather than `/api/mcp`: tasks made
    /// elsewhere read as unknown here, and those made here elsewhere, whatever their owner's
    /// tokens (each endpoint is its own protected resource).
    pub fn for_endpoint(mut self, path: &str) -> Self {
        self.endpoint = Some(path.to_owned());
        self
    }

    /// `owner`'s task `task_id` when this endpoint made it; every read of the service's own
    /// records goes through here.
    async fn read(&self, owner: &str, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.store.get(owner, task_id).await?.filter(|record| record.endpoint == self.endpoint))
    }

    /// Ends rounds when `stopping` begins: each gets [`ROUND_STOP_GRACE`] to finish, and then
    /// its task fails, saying why.
    pub fn with_stopping(mut self, stopping: crate::state::Stopping) -> Self {
        self.stopping = stopping;
        self
    }

    /// How many rounds run in this process now (across every service sharing its slots).
    pub fn running(&self) -> usize {
        self.running.held()
    }

    /// Sets how long one round of a task's work may run before the task fails
    /// (`MCP_TASK_ROUND_SECONDS`).
    pub fn with_round_limit(mut self, limit: Duration) -> Self {
        self.round_limit = limit;
        self
    }

    /// Sets how many tasks one caller may hold and create per minute, and all callers together
    /// hold.
    pub fn with_quota(mut self, quota: TaskQuota) -> Self {
        self.quota = quota;
        self
    }

    /// Stores a new task under its owner's quota: past it, the 429 that says which limit.
    async fn create(&self, record: &TaskRecord) -> Result<(), McpError> {
        let bytes = record_bytes(record);
        if bytes > MAX_TASK_RECORD_BYTES {
            return Err(McpError::invalid_params(format!(
                "A task keeps at most {MAX_TASK_RECORD_BYTES} bytes of arguments, client capabilities and result; \
                 this one would keep {bytes}"
            )));
        }
        let created = match self.store.create(record, self.quota).await {
            Err(_) if self.landed(record).await => Ok(()),
            created => created.map_err(self.store_fault("create"))?,
        };
        let refused = match created {
            Ok(()) => return Ok(()),
            Err(TaskRefused::OverShare(share)) => {
                format!("You hold too many tasks (limit {share}); they are kept for an hour after they are created")
            }
            Err(TaskRefused::OverTotal(total)) => {
                format!(
                    "Too many tasks are held on this server (limit {total}); they are kept for an hour after they \
                     are created, try again later"
                )
            }
            Err(TaskRefused::TooFast(rate)) => {
                format!("You created too many tasks this minute (limit {rate}); try again in a minute")
            }
        };
        Err(McpError::too_many_requests(refused))
    }

    /// Sets how many tasks may run at once, per owner and in all.
    pub fn with_caps(mut self, caps: SlotCaps) -> Self {
        self.caps = caps;
        self
    }

    /// Counts running tasks in `running`, which other services may share: a process that serves
    /// tasks on several endpoints counts each caller's tasks once, across all of them.
    pub fn with_running_slots(mut self, running: Arc<Slots>) -> Self {
        self.running = running;
        self
    }

    /// A slot for one `tasks/update` of `principal`'s whose store work is in flight, or the 429
    /// that says which cap is reached. An update's work goes on past its request (so that a
    /// caller who leaves midway does not strand a task it resumed); a caller who sends updates
    /// and leaves at once, while the store is slow, holds at most its share of such work.
    pub fn update_slot(&self, principal: &Principal) -> Result<Slot, McpError> {
        self.updating.acquire(principal.id(), UPDATE_CAPS).map_err(|full| {
            full.too_many_requests(
                UPDATE_CAPS,
                ["Too many task updates are in flight on this server", "try again shortly"],
                ["You have too many task updates in flight", "wait for them to be answered"],
            )
        })
    }

    /// A running slot for `principal`'s next round of work, or the 429 that says which cap is
    /// reached. Taken before anything is stored, so a refused call leaves nothing behind.
    fn running_slot(&self, principal: &Principal) -> Result<Slot, McpError> {
        self.running.acquire(principal.id(), self.caps).map_err(|full| {
            full.too_many_requests(
                self.caps,
                ["Too many tasks are running on this server", "try again later"],
                ["You have too many tasks running", "wait for one to finish or cancel one"],
            )
        })
    }

    /// The error a task whose round panicked ends with, and its `panic` line: the id in one is
    /// the other's, as a request's is.
    fn contained_panic(&self) -> McpError {
        let Some(logger) = &self.logger else {
            let _ = crate::observe::take_panic_location();
            return McpError::internal("Internal error");
        };
        let id = logger.new_id();
        logger.contained_panic("correlationId", &id);
        McpError::internal(format!("Internal error (correlation id {id})"))
            .with_data(serde_json::json!({ "correlationId": id }))
    }

    /// Logs store faults as `task.fault` lines whose correlation id the caller's error carries.
    pub fn with_logger(mut self, logger: crate::observe::Logger) -> Self {
        self.logger = Some(logger);
        self
    }

    /// A store error as the caller's `-32603`: an outage carries a correlation id (when there is
    /// a log) that its `task.fault` line shares; contention is expected and reported as it is.
    fn store_fault(&self, operation: &'static str) -> impl FnOnce(StoreError) -> McpError {
        move |error| match &self.logger {
            Some(logger) if error.kind() != StoreErrorKind::Contention => {
                McpError::internal(logger.fault("task.fault", operation, error.message()))
            }
            _ => McpError::internal(error.message().to_owned()),
        }
    }

    /// The error of a request whose write, handed to work past it, ended without an answer (the
    /// work panicked): logged as a `task.fault` with a correlation id, as a store fault is.
    pub(crate) fn work_lost(&self, operation: &'static str) -> McpError {
        self.store_fault(operation)(StoreError::fault("the task's work ended without answering"))
    }

    fn announce(&self, record: &TaskRecord) {
        self.bus.publish(ChangeEvent::TaskChanged { owner: record.owner.clone(), task_id: record.task_id.clone() });
    }

    fn new_record(&self, task: NewTask<'_>, status: TaskStatus) -> TaskRecord {
        use base64::Engine;
        // `is_task_id` knows this shape: 16 random bytes, base64url without padding.
        let mut id = [0u8; 16];
        self.random.fill(&mut id);
        let now = self.clock.now_ms();
        TaskRecord {
            version: 1,
            task_id: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id),
            owner: task.principal.id().to_owned(),
            owner_verified: task.principal.is_verified(),
            owner_scopes: task.principal.scopes().to_vec(),
            tool: task.tool.to_owned(),
            arguments: task.arguments,
            status,
            status_message: None,
            created_at: now,
            updated_at: now,
            ttl_ms: TASK_TTL_MS,
            input_requests: Map::new(),
            input_responses: Map::new(),
            asked_keys: Vec::new(),
            key_aliases: Default::default(),
            state: Some(json!({ "capabilities": task.client_capabilities, "handler": Value::Null })),
            result: None,
            error: None,
            cancel_requested: false,
            round_limit_ms: Some(self.round_limit_ms()),
            endpoint: self.endpoint.clone(),
        }
    }

    /// The round limit as a record keeps it.
    fn round_limit_ms(&self) -> u64 {
        u64::try_from(self.round_limit.as_millis()).unwrap_or(u64::MAX)
    }

    /// Durably creates a working task, starts `handler` on it, and returns the
    /// `CreateTaskResult` body.
    /// The run is traced as `span` (the creating request's `execute_tool` span, or nothing).
    pub async fn start(
        self: &Arc<Self>,
        task: NewTask<'_>,
        handler: ToolFn,
        span: SpanHandle,
    ) -> Result<Map<String, Value>, McpError> {
        let slot = self.running_slot(task.principal)?;
        let record = self.new_record(task, TaskStatus::Working);
        // The create and the run that follows it are one piece of work past the request: a
        // caller that goes away while the create is in flight (its future dropped, the command
        // already sent) would otherwise leave a working task that nothing runs.
        let (created_tx, created) = tokio::sync::oneshot::channel();
        let (service, kept) = (self.clone(), record.clone());
        crate::state::background::spawn(async move {
            let outcome = span.in_context(service.create(&kept)).await;
            let stored = outcome.is_ok();
            let _ = created_tx.send(outcome);
            if stored {
                service.run(kept, handler, span, slot).await;
            }
        });
        created.await.map_err(|_| self.work_lost("create"))??;
        Ok(self.create_result(&record))
    }

    /// Records work that already finished inline as a completed task (the server may hand back
    /// a task for a result it already has), and returns the `CreateTaskResult` body.
    pub async fn finished(&self, task: NewTask<'_>, result: Value) -> Result<Map<String, Value>, McpError> {
        let mut record = self.new_record(task, TaskStatus::Completed);
        record.result = Some(result);
        self.create(&record).await?;
        Ok(self.create_result(&record))
    }

    /// Runs a round past the response that started it; on Vercel, inside that invocation, which
    /// stays open until the round ends (at most its round limit, under the function's maximum
    /// duration).
    fn spawn(self: &Arc<Self>, record: TaskRecord, handler: ToolFn, span: SpanHandle, slot: Slot) {
        crate::state::background::spawn(self.clone().run(record, handler, span, slot));
    }

    /// Runs one round of a task's work, racing it against cancellation and the round limit, as
    /// `span`, holding `slot` until the round ends.
    async fn run(self: Arc<Self>, record: TaskRecord, handler: ToolFn, span: SpanHandle, _slot: Slot) {
        let state = record.state.clone().unwrap_or(Value::Null);
        let capabilities = state.get("capabilities").and_then(Value::as_object).cloned().unwrap_or_default();
        let mut handler_state = state.get("handler").filter(|h| !h.is_null()).cloned();
        let context = {
            let (bus, record, capabilities, span) =
                (self.bus.clone(), record.clone(), capabilities.clone(), span.clone());
            move |handler_state: Option<Value>| {
                let principal = Principal::restore(&record.owner, record.owner_verified, record.owner_scopes.clone());
                let id = RequestId::from_value(Value::String(record.task_id.clone())).expect("task ids are strings");
                let mut ctx = RequestContext::new(id, Era::Modern, principal, bus.clone());
                ctx.client_capabilities = capabilities.clone();
                ctx.input_responses = record.input_responses.clone();
                ctx.request_state = handler_state;
                ctx.span = span.clone();
                ctx
            }
        };
        // The handler is called inside the contained future: a typed handler's parameters are
        // deserialised in that call, and a panic there is contained like one in its body.
        let arguments = Value::Object(record.arguments.clone());
        let work = catch_unwind(span.in_context(async move {
            for _ in 0..STATE_ONLY_ROUNDS {
                match handler(context(handler_state.take()), &arguments).await {
                    // A round that asks for nothing and hands back only its state (the load
                    // shedding of a synchronous call, which its client retries at once with that
                    // state): here the server is the one that retries, so the next round runs
                    // now. Stored, the task would wait in input_required for an answer to nothing.
                    Ok(Outcome::InputRequired(input)) if input.requests.is_empty() => handler_state = input.state,
                    outcome => return outcome,
                }
            }
            Err(ToolError::Protocol(McpError::internal(format!(
                "The task's work handed back only its state {STATE_ONLY_ROUNDS} rounds in a row, asking for nothing"
            ))))
        }));
        let cancelled = self.watch_for_cancel(&record.owner, &record.task_id);
        // A round that outlives its limit is stopped and the task failed, saying why: cut off by
        // the platform instead, it would read as working until its TTL.
        let over_time = tokio::time::sleep(self.round_limit);
        let stopped = async {
            self.stopping.begun().await;
            tokio::time::sleep(ROUND_STOP_GRACE).await;
        };
        tokio::select! {
            outcome = work => {
                let outcome = outcome.unwrap_or_else(|_| Err(ToolError::Protocol(self.contained_panic())));
                crate::handler::mark_tool_span(&span, &outcome);
                span.in_context(self.settle_or_log(&record, &outcome, &capabilities)).await;
            }
            _ = cancelled => span.set([opentelemetry::KeyValue::new("mcp.task.status", "cancelled")]),
            () = over_time => {
                let outcome = Err(ToolError::Protocol(McpError::internal(format!(
                    "The task's work did not finish within {} s, the longest a round may run here; \
                     work that takes longer belongs in a job",
                    self.round_limit.as_secs()
                ))));
                crate::handler::mark_tool_span(&span, &outcome);
                span.in_context(self.settle_or_log(&record, &outcome, &capabilities)).await;
            }
            () = stopped => {
                let outcome = Err(ToolError::Protocol(McpError::internal(
                    "The server instance running the task's work stopped before the work finished; \
                     create the task again",
                )));
                crate::handler::mark_tool_span(&span, &outcome);
                span.in_context(self.settle_or_log(&record, &outcome, &capabilities)).await;
            }
        }
        span.end();
    }

    /// Resolves once the task is cancelled (or gone, or ended by another writer): its record is
    /// read when the bus announces a change to it, when the bus says it lost changes, and every
    /// `CANCEL_POLL` otherwise.
    async fn watch_for_cancel(&self, owner: &str, task_id: &str) {
        let mut changes = self.bus.subscribe();
        let mut losses = self.bus.losses();
        loop {
            let lost = async {
                let counting = match losses.as_mut() {
                    Some(count) => count.changed().await.is_ok(),
                    None => false,
                };
                if !counting {
                    // A bus that counts no losses, or no longer can: the periodic read remains.
                    losses = None;
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = task_changed(&mut changes, owner, task_id) => {}
                () = lost => {}
                () = tokio::time::sleep(CANCEL_POLL) => {}
            }
            match self.read(owner, task_id).await {
                Ok(Some(record)) if !record.cancel_requested && !record.status.is_terminal() => {}
                Ok(_) => return,
                Err(_) => {}
            }
        }
    }

    /// Settles a round, trying again while the store fails; a round that still cannot be
    /// stored is logged as a `task.fault` (the task reads as working until `LOST_ROUND_MARGIN`
    /// after its round's limit; the next `tasks/get` or notification of it after that fails it).
    async fn settle_or_log(&self, record: &TaskRecord, outcome: &ToolResult, capabilities: &Map<String, Value>) {
        let mut pause = SETTLE_FIRST_PAUSE;
        for attempt in 1..=SETTLE_ATTEMPTS {
            match self.settle(record, outcome, capabilities).await {
                Ok(()) => return,
                Err(error) if attempt == SETTLE_ATTEMPTS => {
                    if let Some(logger) = &self.logger {
                        logger.fault("task.fault", "settle", error.message());
                    }
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }

    /// Applies the outcome of the round that started from `round`, unless the task was cancelled
    /// meanwhile or the record moved on: nothing else writes a working task, so a record of
    /// another version means this outcome is stored already (an attempt that landed though it
    /// reported an error) and the task may since have gone on to its next round.
    async fn settle(
        &self,
        round: &TaskRecord,
        outcome: &ToolResult,
        capabilities: &Map<String, Value>,
    ) -> Result<(), StoreError> {
        self.modify(&round.owner, &round.task_id, |record| {
            if record.version != round.version || record.status.is_terminal() || record.cancel_requested {
                return false;
            }
            match outcome {
                Ok(Outcome::Complete(result)) => complete(record, result),
                Err(ToolError::Execution(message)) => {
                    complete(record, &crate::protocol::types::CallToolResult::error(message.clone()))
                }
                Err(ToolError::Protocol(error)) => fail(record, error),
                Ok(Outcome::InputRequired(input)) => {
                    let missing: Vec<Value> = input
                        .requests
                        .iter()
                        .filter_map(|(_, r)| {
                            let (needed, granted) = r.capability(capabilities);
                            (!granted).then_some(needed)
                        })
                        .collect();
                    if !missing.is_empty() {
                        let error = McpError::missing_capability(
                            "The task needs input the creating request did not declare it could provide",
                            missing.into_iter().next().unwrap_or(Value::Null),
                        );
                        fail(record, &error);
                        return true;
                    }
                    record.status = TaskStatus::InputRequired;
                    ask(record, &input.requests);
                    let handler_state = input.state.clone().unwrap_or(Value::Null);
                    record.state = Some(json!({ "capabilities": capabilities, "handler": handler_state }));
                }
            }
            let bytes = record_bytes(record);
            if bytes > MAX_TASK_RECORD_BYTES {
                let error = McpError::internal(format!(
                    "The task's outcome would make it {bytes} bytes; a task keeps at most {MAX_TASK_RECORD_BYTES}"
                ));
                fail(record, &error);
                record.result = None;
                record.input_requests.clear();
                record.state = None;
            }
            true
        })
        .await
        .map(|_| ())
    }

    /// Read-modify-write with optimistic concurrency. `change` returns false to leave the
    /// record as it is.
    async fn modify(
        &self,
        owner: &str,
        task_id: &str,
        change: impl Fn(&mut TaskRecord) -> bool,
    ) -> Result<Option<TaskRecord>, StoreError> {
        for _ in 0..16 {
            let Some(mut record) = self.read(owner, task_id).await? else { return Ok(None) };
            if !change(&mut record) {
                return Ok(Some(record));
            }
            record.version += 1;
            record.updated_at = self.clock.now_ms();
            let replaced = match self.store.replace(&record).await {
                Err(_) if self.landed(&record).await => true,
                Err(error) => {
                    // It may have landed with its reply lost, and the read that would tell failed
                    // too: the owner's streams are told to look (one that finds nothing new sends
                    // nothing), rather than hear of it only at their next periodic read.
                    self.announce(&record);
                    return Err(error);
                }
                Ok(replaced) => replaced,
            };
            if replaced {
                self.announce(&record);
                return Ok(Some(record));
            }
        }
        Err(contention())
    }

    /// Whether the store holds `written` exactly: a write that reported an error may have landed
    /// (the reply was lost, not the command). Its writer then goes on as if it had heard so:
    /// otherwise an update that resumed a task, or a start that created one, would leave it
    /// working with nothing running it, and a retry would find it working and resume nothing.
    async fn landed(&self, written: &TaskRecord) -> bool {
        matches!(self.store.get(&written.owner, &written.task_id).await, Ok(Some(stored)) if stored == *written)
    }

    /// `tasks/get`.
    /// `may_see` is asked about the task's tool first (the caller's token may carry fewer
    /// scopes than the one that created it), and its refusal is the answer.
    pub async fn get(
        &self,
        principal: &Principal,
        task_id: &str,
        may_see: impl Fn(&str) -> Result<(), McpError>,
    ) -> Result<Map<String, Value>, McpError> {
        if !is_task_id(task_id) {
            return Err(not_found());
        }
        let record =
            self.read(principal.id(), task_id).await.map_err(self.store_fault("get"))?.ok_or_else(not_found)?;
        may_see(&record.tool)?;
        let record = self.unless_lost(record).await.map_err(self.store_fault("get"))?.ok_or_else(not_found)?;
        Ok(self.detailed(&record))
    }

    /// `record`, unless it has read as working for longer than its round may run (the limit of
    /// the instance that started the round, kept in the record) plus `LOST_ROUND_MARGIN`: then
    /// nothing is running it any more (the instance that ran it stopped, or the round's outcome
    /// could not be stored), and it is failed saying so, by a compare-and-set, so an outcome
    /// stored meanwhile is kept. `None` when it is gone.
    async fn unless_lost(&self, record: TaskRecord) -> Result<Option<TaskRecord>, StoreError> {
        let (limit_ms, lost_after) = self.lost_after(&record);
        if record.status != TaskStatus::Working || self.clock.now_ms() <= lost_after {
            return Ok(Some(record));
        }
        let allowed_ms = lost_after - record.updated_at;
        let error = McpError::internal(format!(
            "The task's work was lost: it was still working {} s after its round began, past the {} s a \
             round may run (the instance running it may have stopped). Start it again.",
            allowed_ms / 1000,
            limit_ms / 1000
        ));
        let version = record.version;
        self.modify(&record.owner, &record.task_id, |stored| {
            if stored.version != version || stored.status != TaskStatus::Working {
                return false;
            }
            fail(stored, &error);
            true
        })
        .await
    }

    /// The longest `record`'s round may run (ms, the limit of the instance that started it when
    /// the record keeps it), and the last moment (clock ms) it may still read as working:
    /// past it, its work was lost.
    fn lost_after(&self, record: &TaskRecord) -> (u64, u64) {
        let limit_ms = record.round_limit_ms.unwrap_or_else(|| self.round_limit_ms());
        let margin_ms = u64::try_from(LOST_ROUND_MARGIN.as_millis()).unwrap_or(u64::MAX);
        (limit_ms, record.updated_at.saturating_add(limit_ms).saturating_add(margin_ms))
    }

    /// The `notifications/tasks` params for `principal`'s task (the detailed task, without
    /// `resultType`); `None` when it has no such task, an error when the store cannot say.
    /// A task whose tool `may_see` refuses is left out as one that does not exist.
    pub async fn notification(
        &self,
        principal: &Principal,
        task_id: &str,
        may_see: impl Fn(&str) -> bool,
    ) -> Result<Option<Map<String, Value>>, StoreError> {
        Ok(self.watched(principal, task_id, may_see).await?.map(|watched| watched.params))
    }

    /// `principal`'s task as a listen stream that names it sees it: its notification's params
    /// ([`TaskService::notification`], failing it first if its work was lost, as every read does)
    /// and, while it is still working, how long until it would count as lost. Nothing else
    /// announces that moment (the instance that would have is gone), so the stream reads the task
    /// again then.
    pub async fn watched(
        &self,
        principal: &Principal,
        task_id: &str,
        may_see: impl Fn(&str) -> bool,
    ) -> Result<Option<Watched>, StoreError> {
        if !is_task_id(task_id) {
            return Ok(None);
        }
        let _reading = self.watching.take(principal.id()).await;
        let Some(record) = self.read(principal.id(), task_id).await? else { return Ok(None) };
        if !may_see(&record.tool) {
            return Ok(None);
        }
        let Some(record) = self.unless_lost(record).await? else { return Ok(None) };
        let lost_in = (record.status == TaskStatus::Working).then(|| {
            // Lost once the clock is past this; at most a day ahead, so that a timer set from it
            // cannot overflow whatever the record says.
            let (_, lost_after) = self.lost_after(&record);
            let wait_ms = lost_after.saturating_sub(self.clock.now_ms()).saturating_add(1).min(86_400_000);
            Duration::from_millis(wait_ms)
        });
        let mut params = self.detailed(&record);
        params.remove("resultType");
        Ok(Some(Watched { params, lost_in }))
    }

    /// How many callers' listen reads hold or wait for a turn at the store.
    #[cfg(test)]
    pub(crate) fn callers_reading(&self) -> usize {
        self.watching.principals()
    }

    /// `tasks/update`: records the answers to outstanding requests (others are ignored). When
    /// this call answers the last of them the task resumes, and what is returned is the one to
    /// run. Only that call resumes it: a repeated update (a retry, or one racing the first) finds
    /// the task working already and returns `None`, so the handler never runs twice for a round.
    /// The update that would resume the task needs a running slot free for its caller: when none
    /// is, it is refused (429) and records nothing. One that answers part of the requests needs none.
    pub async fn update(
        &self,
        principal: &Principal,
        task_id: &str,
        responses: &Map<String, Value>,
    ) -> Result<Option<Resumed>, McpError> {
        self.update_if(principal, task_id, responses, |_| Ok(())).await
    }

    /// [`TaskService::update`], refused with what `may_answer` says of the task's tool when it
    /// refuses (read on the same read as the compare-and-set, so nothing is stored then).
    pub async fn update_if(
        &self,
        principal: &Principal,
        task_id: &str,
        responses: &Map<String, Value>,
        may_answer: impl Fn(&str) -> Result<(), McpError>,
    ) -> Result<Option<Resumed>, McpError> {
        if !is_task_id(task_id) {
            return Err(not_found());
        }
        // Taken by the first attempt that would resume the task, and kept across retried
        // compare-and-sets; a refusal stops the update with nothing stored.
        let slot = std::sync::Mutex::new(None::<Slot>);
        let refused = std::sync::Mutex::new(None::<McpError>);
        // Set by the attempt that is stored: a retried compare-and-set decides afresh.
        let resumes = std::sync::atomic::AtomicBool::new(false);
        let updated = self
            .modify(principal.id(), task_id, |record| {
                resumes.store(false, std::sync::atomic::Ordering::Relaxed);
                if record.status != TaskStatus::InputRequired {
                    return false;
                }
                if let Err(error) = may_answer(&record.tool) {
                    *refused.lock().expect("refusal") = Some(error);
                    return false;
                }
                let mut changed = false;
                for (key, answer) in responses {
                    if record.input_requests.remove(key).is_some() {
                        let asked_as = record.key_aliases.remove(key).unwrap_or_else(|| key.clone());
                        record.input_responses.insert(asked_as, answer.clone());
                        changed = true;
                    }
                }
                let bytes = record_bytes(record);
                if bytes > MAX_TASK_RECORD_BYTES {
                    *refused.lock().expect("refusal") = Some(McpError::invalid_params(format!(
                        "These answers would make the task {bytes} bytes; a task keeps at most {MAX_TASK_RECORD_BYTES}"
                    )));
                    return false;
                }
                if changed && record.input_requests.is_empty() {
                    let mut slot = slot.lock().expect("slot");
                    if slot.is_none() {
                        match self.running_slot(principal) {
                            Ok(taken) => *slot = Some(taken),
                            Err(error) => {
                                *refused.lock().expect("refusal") = Some(error);
                                return false;
                            }
                        }
                    }
                    record.status = TaskStatus::Working;
                    record.round_limit_ms = Some(self.round_limit_ms());
                    resumes.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                changed
            })
            .await
            .map_err(self.store_fault("answer"))?
            .ok_or_else(not_found)?;
        if let Some(error) = refused.into_inner().expect("refusal") {
            return Err(error);
        }
        let slot = slot.into_inner().expect("slot");
        Ok(match (resumes.into_inner(), slot) {
            (true, Some(slot)) => Some(Resumed { record: updated, slot }),
            _ => None,
        })
    }

    /// Resumes a task whose inputs are all answered.
    pub fn resume(self: &Arc<Self>, resumed: Resumed, handler: ToolFn, span: SpanHandle) {
        self.spawn(resumed.record, handler, span, resumed.slot);
    }

    /// `tasks/cancel`: a task that is not finished becomes cancelled at once; running work stops
    /// at its next check. Cancelling a finished task changes nothing.
    /// `may_cancel` is asked about the task's tool first, as [`TaskService::get`] does.
    pub async fn cancel(
        &self,
        principal: &Principal,
        task_id: &str,
        may_cancel: impl Fn(&str) -> Result<(), McpError>,
    ) -> Result<(), McpError> {
        if !is_task_id(task_id) {
            return Err(not_found());
        }
        let refused = std::sync::Mutex::new(None::<McpError>);
        let cancelled = self.modify(principal.id(), task_id, |record| {
            if let Err(error) = may_cancel(&record.tool) {
                *refused.lock().expect("refusal") = Some(error);
                return false;
            }
            if record.status.is_terminal() {
                return false;
            }
            record.cancel_requested = true;
            record.status = TaskStatus::Cancelled;
            record.status_message = Some("cancelled by the client".into());
            record.input_requests.clear();
            true
        });
        let cancelled = cancelled.await.map_err(self.store_fault("cancel"))?.ok_or_else(not_found);
        match refused.into_inner().expect("refusal") {
            Some(error) => Err(error),
            None => cancelled.map(|_| ()),
        }
    }

    fn task_fields(&self, record: &TaskRecord) -> Map<String, Value> {
        let mut task = Map::new();
        task.insert("taskId".into(), json!(record.task_id));
        task.insert("status".into(), json!(record.status));
        if let Some(message) = &record.status_message {
            task.insert("statusMessage".into(), json!(message));
        }
        task.insert("createdAt".into(), json!(iso8601(record.created_at)));
        task.insert("lastUpdatedAt".into(), json!(iso8601(record.updated_at)));
        task.insert("ttlMs".into(), json!(record.ttl_ms));
        task.insert("pollIntervalMs".into(), json!(POLL_INTERVAL_MS));
        task
    }

    fn create_result(&self, record: &TaskRecord) -> Map<String, Value> {
        let mut result = self.task_fields(record);
        result.insert("resultType".into(), json!("task"));
        result
    }

    fn detailed(&self, record: &TaskRecord) -> Map<String, Value> {
        let mut result = self.task_fields(record);
        result.insert("resultType".into(), json!("complete"));
        match record.status {
            TaskStatus::InputRequired => {
                result.insert("inputRequests".into(), Value::Object(record.input_requests.clone()));
            }
            TaskStatus::Completed => {
                if let Some(outcome) = &record.result {
                    result.insert("result".into(), outcome.clone());
                }
            }
            TaskStatus::Failed => {
                if let Some(error) = &record.error {
                    result.insert("error".into(), error.clone());
                }
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        result
    }
}

/// Records a round's requests as outstanding, each under a key the task has never sent: the
/// handler's own key the first time, `{key}~{n}` (the smallest free `n` from 2) when an earlier
/// round used it, remembered so that its answer reaches the handler under the key it asked with.
/// Keys are unique over a task's lifetime, and a client may ignore one it has answered already:
/// sent again, it could leave the task waiting for good.
fn ask(record: &mut TaskRecord, requests: &[(String, crate::protocol::types::InputRequest)]) {
    record.input_requests.clear();
    record.key_aliases.clear();
    let mut taken: std::collections::BTreeSet<String> = record.asked_keys.iter().cloned().collect();
    taken.extend(requests.iter().map(|(key, _)| key.clone()));
    for (key, request) in requests {
        let sent_as = if record.asked_keys.contains(key) {
            let fresh = (2u32..).map(|n| format!("{key}~{n}")).find(|k| !taken.contains(k)).expect("a free key");
            taken.insert(fresh.clone());
            record.key_aliases.insert(fresh.clone(), key.clone());
            fresh
        } else {
            key.clone()
        };
        record.input_requests.insert(sent_as, request.to_json());
    }
    record.asked_keys.extend(record.input_requests.keys().cloned());
}

/// How long `record` is serialised, counted without building the text.
fn record_bytes(record: &TaskRecord) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, record).map_or(usize::MAX, |()| count.0)
}

/// Resolves at the next change the bus announces for `owner`'s task `task_id`, or as soon as the
/// bus says it lost changes (any of them may have been this task's).
async fn task_changed(changes: &mut tokio::sync::broadcast::Receiver<ChangeEvent>, owner: &str, task_id: &str) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match changes.recv().await {
            Ok(ChangeEvent::TaskChanged { owner: changed_owner, task_id: changed })
                if changed == task_id && changed_owner == owner =>
            {
                return;
            }
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return,
            // A bus that is gone announces nothing more: the reads every `CANCEL_POLL` remain.
            Err(RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// Ends `record` failed with `error`, as `tasks/get` reports it.
fn fail(record: &mut TaskRecord, error: &McpError) {
    record.status = TaskStatus::Failed;
    record.status_message = Some(error.message.to_string());
    record.error = Some(error.to_json());
}

fn complete(record: &mut TaskRecord, result: &crate::protocol::types::CallToolResult) {
    let mut value = serde_json::to_value(result).expect("results serialise");
    value["resultType"] = json!("complete");
    record.status = TaskStatus::Completed;
    record.result = Some(value);
    record.input_requests.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{Logger, MemorySink};
    use crate::state::{LocalBus, ManualClock, Sealer, SeededRandom};

    /// A service over `store`, on a clock at 0, seeded randomness and an in-process bus.
    fn service_over(store: Arc<dyn TaskStore>) -> TaskService {
        TaskService::new(
            store,
            Arc::new(ManualClock::new(0)),
            Arc::new(SeededRandom::new(1)),
            Arc::new(LocalBus::default()),
        )
    }

    /// `owner`'s task `task_id` of the `ask` tool, at `version`, in `status`, asking for each of
    /// `requests`.
    // Ids in these tests are padded with `_` to the 22 characters of a minted one (`is_task_id`).
    fn task_record(owner: &str, task_id: &str, version: u64, status: &str, requests: &[&str]) -> TaskRecord {
        let requests: Map<String, Value> =
            requests.iter().map(|key| (key.to_string(), serde_json::json!({"method": "elicitation/create"}))).collect();
        serde_json::from_value(serde_json::json!({
            "version": version, "taskId": task_id, "owner": owner, "ownerVerified": true, "ownerScopes": [],
            "tool": "ask", "arguments": {}, "status": status, "createdAt": 0, "updatedAt": 0, "ttlMs": 60000,
            "inputRequests": requests
        }))
        .unwrap()
    }

    /// An accepted answer to the request `key`.
    fn answer(key: &str) -> Map<String, Value> {
        serde_json::json!({ key: {"action": "accept"} }).as_object().unwrap().clone()
    }

    /// A service over `store` whose rounds may run 30 s, on a clock the test moves.
    fn thirty_second_rounds(store: Arc<dyn TaskStore>) -> (Arc<ManualClock>, TaskService) {
        let clock = Arc::new(ManualClock::new(0));
        let service =
            TaskService::new(store, clock.clone(), Arc::new(SeededRandom::new(1)), Arc::new(LocalBus::default()))
                .with_round_limit(Duration::from_secs(30));
        (clock, service)
    }

    /// A task's work that never finishes (until it is cancelled or stopped).
    fn never_finishing() -> ToolFn {
        Arc::new(|_, _| Box::pin(std::future::pending()))
    }

    /// `who`'s new task of the `forever` tool.
    fn forever_task(who: &Principal) -> NewTask<'_> {
        NewTask { principal: who, tool: "forever", arguments: Map::new(), client_capabilities: Map::new() }
    }

    /// A task's work that finishes at once.
    fn finishing() -> ToolFn {
        Arc::new(|_, _| Box::pin(async { Ok(Outcome::Complete(crate::protocol::types::CallToolResult::text("done"))) }))
    }

    /// The update that answers a task's last request resumes it; the same update sent again (a
    /// retry), an empty one, or one after it finished resumes nothing.
    #[tokio::test]
    async fn only_the_update_that_answers_the_last_request_resumes_the_task() {
        let store = Arc::new(store::MemoryTaskStore::default());
        let service = service_over(store.clone());
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let record = task_record(alice.id(), "t1____________________", 0, "input_required", &["a", "b"]);
        store.create(&record, TaskQuota::default()).await.unwrap().unwrap();

        assert!(
            service.update(&alice, "t1____________________", &answer("a")).await.unwrap().is_none(),
            "one request still open"
        );
        let resumed = service
            .update(&alice, "t1____________________", &answer("b"))
            .await
            .unwrap()
            .expect("the last answer resumes");
        assert_eq!((resumed.record.status, resumed.record.input_responses.len()), (TaskStatus::Working, 2));
        assert_eq!(resumed.record.round_limit_ms, Some(280_000), "the resumed round's limit is kept with it");
        for again in [answer("b"), answer("a"), Map::new()] {
            assert!(
                service.update(&alice, "t1____________________", &again).await.unwrap().is_none(),
                "resumed once only: {again:?}"
            );
        }
        let bob = Principal::verified(Some("bob"), None, vec![]);
        assert!(
            service.update(&bob, "t1____________________", &answer("b")).await.is_err(),
            "another principal's task is not found"
        );
    }

    /// A task record is bounded in bytes: a start whose arguments and capabilities pass the
    /// bound is refused and stores nothing; answers that would pass it are refused and recorded
    /// not at all, while smaller ones still are; an outcome that would pass it fails the task,
    /// saying why. Before, every answer could add a request body to a record, and the records a
    /// caller may hold were counted, not weighed.
    #[tokio::test]
    async fn a_task_record_is_bounded_in_bytes() {
        let store = Arc::new(store::MemoryTaskStore::default());
        let service = Arc::new(service_over(store.clone()));
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let big = |bytes: usize| Value::String("x".repeat(bytes));
        let arguments: Map<String, Value> = [("document".to_owned(), big(MAX_TASK_RECORD_BYTES))].into_iter().collect();
        let task = NewTask { principal: &alice, tool: "t", arguments, client_capabilities: Map::new() };
        let refused = service.start(task, finishing(), SpanHandle::default()).await.unwrap_err();
        assert_eq!(refused.code, crate::protocol::ErrorCode::INVALID_PARAMS);
        assert!(refused.message.starts_with("A task keeps at most 262144 bytes"), "{}", refused.message);
        assert!(store.tasks.lock().unwrap().is_empty(), "a refused start stores nothing");

        let record = task_record(alice.id(), "t1____________________", 0, "input_required", &["a", "b", "c"]);
        store.create(&record, TaskQuota::default()).await.unwrap().unwrap();
        let sized = |key: &str, bytes: usize| -> Map<String, Value> {
            serde_json::json!({ key: {"action": "accept", "content": {"text": big(bytes)}} })
                .as_object()
                .unwrap()
                .clone()
        };
        assert!(service.update(&alice, "t1____________________", &sized("a", 150 * 1024)).await.unwrap().is_none());
        let refused = service.update(&alice, "t1____________________", &sized("b", 150 * 1024)).await.unwrap_err();
        assert!(refused.message.starts_with("These answers would make the task"), "{}", refused.message);
        let stored = store.get(alice.id(), "t1____________________").await.unwrap().unwrap();
        assert_eq!((stored.input_responses.len(), stored.input_requests.len()), (1, 2), "nothing of b recorded");
        assert!(
            service.update(&alice, "t1____________________", &sized("b", 1024)).await.unwrap().is_none(),
            "a small answer still is"
        );

        let round = store.get(alice.id(), "t1____________________").await.unwrap().unwrap();
        let huge =
            Ok(Outcome::Complete(crate::protocol::types::CallToolResult::text("y".repeat(MAX_TASK_RECORD_BYTES))));
        service.settle(&round, &huge, &Map::new()).await.unwrap();
        let failed = store.get(alice.id(), "t1____________________").await.unwrap().unwrap();
        assert_eq!((failed.status, failed.result.is_none()), (TaskStatus::Failed, true));
        assert!(failed.status_message.unwrap().starts_with("The task's outcome would make it"));
    }

    /// Tasks run in this instance, so a caller may have only its share running, and all callers
    /// the total: a start or an update past a cap is refused with 429 and stores nothing, and a
    /// slot is free again once its round ends (here, by cancellation).
    #[tokio::test(start_paused = true)]
    async fn running_tasks_are_capped_per_caller_and_in_all() {
        let store = Arc::new(store::MemoryTaskStore::default());
        let service = Arc::new(service_over(store.clone()).with_caps(SlotCaps { per_principal: 2, total: 4 }));
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let bob = Principal::verified(Some("bob"), None, vec![]);
        let start = |who| service.start(forever_task(who), never_finishing(), SpanHandle::default());
        let stored = || store.tasks.lock().unwrap().len();

        let first = start(&alice).await.unwrap()["taskId"].as_str().unwrap().to_owned();
        start(&alice).await.unwrap();
        let refused = start(&alice).await.unwrap_err();
        assert_eq!(refused.status, http::StatusCode::TOO_MANY_REQUESTS);
        assert!(refused.message.contains("You have too many tasks running (limit 2)"), "{}", refused.message);
        assert_eq!(stored(), 2, "a refused start stores nothing");
        start(&bob).await.unwrap();

        // At her cap, alice may still answer part of her parked task's requests; the answer that
        // would run it is refused, and not recorded.
        let parked = task_record(alice.id(), "parked________________", 1, "input_required", &["a", "b"]);
        store.create(&parked, TaskQuota::default()).await.unwrap().unwrap();
        assert!(
            service.update(&alice, "parked________________", &answer("b")).await.unwrap().is_none(),
            "a part needs no slot"
        );
        let refused = service.update(&alice, "parked________________", &answer("a")).await.unwrap_err();
        assert_eq!(refused.status, 429);
        assert!(refused.message.starts_with("You have too many tasks running"), "{}", refused.message);
        let unchanged = store.get(alice.id(), "parked________________").await.unwrap().unwrap();
        assert_eq!((unchanged.status, unchanged.input_responses.len()), (TaskStatus::InputRequired, 1));
        start(&bob).await.unwrap();
        // Full: a third caller, under its own share, meets the total.
        let carol = Principal::verified(Some("carol"), None, vec![]);
        let full = start(&carol).await.unwrap_err();
        assert!(full.message.contains("on this server (limit 4)"), "{}", full.message);

        // Cancelled, the first task's round ends at its next check, and its slot is free.
        service.cancel(&alice, &first, |_| Ok(())).await.unwrap();
        tokio::time::sleep(CANCEL_POLL * 2).await;
        let resumed = service
            .update(&alice, "parked________________", &answer("a"))
            .await
            .unwrap()
            .expect("answered, it resumes");
        assert_eq!(resumed.record.status, TaskStatus::Working);
        assert!(start(&alice).await.is_err(), "the resumed round holds the freed slot");
    }

    /// Past its share of held tasks, its rate, or the total every caller holds, a caller's new
    /// task is refused with 429 naming the limit, and nothing runs.
    #[tokio::test]
    async fn a_caller_past_its_task_quota_gets_429_naming_the_limit() {
        // The second task is the first caller's, or, for the total, another caller's.
        for (quota, expected, second) in [
            (TaskQuota { share: 1, per_minute: 100, total: 100 }, "You hold too many tasks (limit 1)", "alice"),
            (
                TaskQuota { share: 100, per_minute: 1, total: 100 },
                "You created too many tasks this minute (limit 1)",
                "alice",
            ),
            (
                TaskQuota { share: 100, per_minute: 100, total: 1 },
                "Too many tasks are held on this server (limit 1)",
                "bob",
            ),
        ] {
            let store = Arc::new(store::MemoryTaskStore::default());
            let service = Arc::new(service_over(store.clone()).with_quota(quota));
            let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counted = ran.clone();
            let count: ToolFn = Arc::new(move |ctx, arguments| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                finishing()(ctx, arguments)
            });
            let (alice, other) =
                (Principal::verified(Some("alice"), None, vec![]), Principal::verified(Some(second), None, vec![]));
            let task = |principal| NewTask {
                principal,
                tool: "count",
                arguments: Map::new(),
                client_capabilities: Map::new(),
            };
            service.start(task(&alice), count.clone(), SpanHandle::default()).await.unwrap();
            let refused = service.start(task(&other), count.clone(), SpanHandle::default()).await.unwrap_err();
            assert_eq!(refused.status, http::StatusCode::TOO_MANY_REQUESTS);
            assert!(refused.message.starts_with(expected), "{}", refused.message);
            let finished = service.finished(task(&other), serde_json::json!({})).await.unwrap_err();
            assert!(finished.message.starts_with(expected), "an already finished task counts too");
            tokio::task::yield_now().await;
            assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1, "only the first ran");
            assert_eq!(store.tasks.lock().unwrap().len(), 1);
        }
    }

    /// An outcome is stored only onto the record its round started from: a retried settle whose
    /// first attempt landed (though it reported an error) finds a later version, and leaves
    /// alone a task that has since moved on to its next round.
    #[tokio::test]
    async fn an_outcome_is_stored_only_onto_its_own_round() {
        let store = Arc::new(store::MemoryTaskStore::default());
        let service = service_over(store.clone());
        let round = task_record("sub:alice", "t", 1, "working", &[]);
        store.create(&round, TaskQuota::default()).await.unwrap().unwrap();
        let mut next_round = round.clone();
        next_round.version = 3;
        store.tasks.lock().unwrap().insert(("sub:alice".into(), "t".into()), next_round);
        let done = Ok(Outcome::Complete(crate::protocol::types::CallToolResult::text("old round")));
        service.settle(&round, &done, &Map::new()).await.unwrap();
        let kept = store.get("sub:alice", "t").await.unwrap().unwrap();
        assert_eq!((kept.version, kept.status), (3, TaskStatus::Working), "the later round is untouched");
        let mut current = round.clone();
        current.version = 3;
        service.settle(&current, &done, &Map::new()).await.unwrap();
        assert_eq!(store.get("sub:alice", "t").await.unwrap().unwrap().status, TaskStatus::Completed);
    }

    /// Keys are unique over a task's lifetime: a handler asking again under a key an earlier
    /// round sent is asked under a fresh one, an answer to the old key is ignored, and the new
    /// answer reaches the handler under the key it asked with.
    #[tokio::test]
    async fn a_key_asked_again_is_sent_under_a_fresh_one() {
        use crate::handler::InputRequired;
        use crate::protocol::types::InputRequest;
        let store = Arc::new(store::MemoryTaskStore::default());
        let service = service_over(store.clone());
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let capabilities = serde_json::json!({"elicitation": {"form": {}}}).as_object().unwrap().clone();
        let asking = |keys: &[&str]| {
            let form = || InputRequest::ElicitForm { message: "?".into(), requested_schema: serde_json::json!({}) };
            let input = keys.iter().fold(InputRequired::new(), |input, key| input.request(*key, form()));
            Ok(Outcome::InputRequired(input))
        };
        let current = || async { store.get(alice.id(), "t_____________________").await.unwrap().unwrap() };
        let sent = |record: &TaskRecord| record.input_requests.keys().cloned().collect::<Vec<_>>();
        store
            .create(&task_record(alice.id(), "t_____________________", 1, "working", &[]), TaskQuota::default())
            .await
            .unwrap()
            .unwrap();

        service.settle(&current().await, &asking(&["confirm"]), &capabilities).await.unwrap();
        assert_eq!(sent(&current().await), ["confirm"], "a first use is sent as it is");
        let first = serde_json::json!({"confirm": {"action": "accept", "content": {"n": 1}}});
        service.update(&alice, "t_____________________", first.as_object().unwrap()).await.unwrap().expect("resumed");

        // The second round asks `confirm` again, and `confirm~2` under its own name.
        service.settle(&current().await, &asking(&["confirm", "confirm~2"]), &capabilities).await.unwrap();
        let parked = current().await;
        assert_eq!(sent(&parked), ["confirm~2", "confirm~3"]);
        let listed = service.get(&alice, "t_____________________", |_| Ok(())).await.unwrap();
        let listed: Vec<&String> = listed["inputRequests"].as_object().unwrap().keys().collect();
        assert_eq!(listed, ["confirm~2", "confirm~3"], "tasks/get shows the keys sent");
        assert!(service.update(&alice, "t_____________________", first.as_object().unwrap()).await.unwrap().is_none());
        assert_eq!(current().await, parked, "an answer to a key already answered changes nothing");

        let second = serde_json::json!({
            "confirm~3": {"action": "accept", "content": {"n": 2}},
            "confirm~2": {"action": "decline"}
        });
        let resumed = service
            .update(&alice, "t_____________________", second.as_object().unwrap())
            .await
            .unwrap()
            .expect("resumed");
        let answers = &resumed.record.input_responses;
        assert_eq!(answers["confirm"], second["confirm~3"], "the handler reads its own key");
        assert_eq!(answers["confirm~2"], second["confirm~2"]);
        assert!(!answers.contains_key("confirm~3"));
        assert_eq!(resumed.record.asked_keys, ["confirm", "confirm~2", "confirm~3"]);
    }

    /// A round that outlives its limit is stopped, and the task fails saying why, freeing its
    /// running slot; a round within the limit is left alone.
    #[tokio::test(start_paused = true)]
    async fn a_round_past_its_limit_fails_the_task_and_frees_its_slot() {
        let store = Arc::new(store::MemoryTaskStore::default());
        let limit = Duration::from_secs(30);
        let service = Arc::new(
            service_over(store.clone()).with_caps(SlotCaps { per_principal: 1, total: 4 }).with_round_limit(limit),
        );
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let noticed = dropped.clone();
        let forever: ToolFn = Arc::new(move |_, _| {
            struct Noticed(Arc<std::sync::atomic::AtomicBool>);
            impl Drop for Noticed {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            let noticed = Noticed(noticed.clone());
            Box::pin(async move {
                let _noticed = noticed;
                std::future::pending().await
            })
        });
        let task =
            || NewTask { principal: &alice, tool: "forever", arguments: Map::new(), client_capabilities: Map::new() };
        let created = service.start(task(), forever.clone(), SpanHandle::default()).await.unwrap();
        let task_id = created["taskId"].as_str().unwrap().to_owned();
        tokio::time::sleep(limit - Duration::from_secs(1)).await;
        let working = store.get(alice.id(), &task_id).await.unwrap().unwrap();
        assert_eq!((working.status, working.round_limit_ms), (TaskStatus::Working, Some(30_000)));
        assert!(service.start(task(), forever.clone(), SpanHandle::default()).await.is_err(), "the slot is held");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let failed = store.get(alice.id(), &task_id).await.unwrap().unwrap();
        assert_eq!(failed.status, TaskStatus::Failed);
        let message = failed.status_message.unwrap_or_default();
        assert!(message.contains("did not finish within 30 s") && message.contains("belongs in a job"), "{message}");
        assert_eq!(failed.error.unwrap()["code"], -32603);
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "the work is stopped");
        service.start(task(), forever, SpanHandle::default()).await.expect("its slot is free again");
    }

    /// A running round hears of its cancel on the bus at once, without reading its record on a
    /// timer; a cancel the bus never announced (lost on the way from another instance) is found
    /// by the read every `CANCEL_POLL`, and not before.
    #[tokio::test(start_paused = true)]
    async fn a_cancel_stops_its_round_when_announced_and_at_the_next_read_when_not() {
        let store = Arc::new(store::MemoryTaskStore::default());
        let service = Arc::new(service_over(store.clone()).with_caps(SlotCaps { per_principal: 1, total: 4 }));
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let start = || service.start(forever_task(&alice), never_finishing(), SpanHandle::default());
        let first = start().await.unwrap()["taskId"].as_str().unwrap().to_owned();
        service.cancel(&alice, &first, |_| Ok(())).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = start().await.expect("the cancelled round ended at once, freeing its slot");

        // Cancelled in the store with no announcement, as a cancel whose publish was lost.
        let second = second["taskId"].as_str().unwrap().to_owned();
        let mut record = store.get(alice.id(), &second).await.unwrap().unwrap();
        (record.cancel_requested, record.status, record.version) = (true, TaskStatus::Cancelled, record.version + 1);
        assert!(store.replace(&record).await.unwrap());
        tokio::time::sleep(CANCEL_POLL - Duration::from_millis(100)).await;
        assert!(start().await.is_err(), "nothing told the round yet");
        tokio::time::sleep(Duration::from_millis(200)).await;
        start().await.expect("the periodic read found the cancel");
    }

    /// A task that still reads as working past its round's limit and the margin has nothing
    /// running it any more: `tasks/get` and its notification fail it, saying so, and the store
    /// keeps that. Before the deadline, and in any other status, a task is shown as it is. The
    /// limit is the one the record keeps (its round's instance's), else the reader's.
    #[tokio::test]
    async fn a_task_whose_round_was_lost_is_failed_once_its_round_could_not_still_run() {
        let store = Arc::new(store::MemoryTaskStore::default());
        let (clock, service) = thirty_second_rounds(store.clone());
        let alice = Principal::verified(Some("alice"), None, vec![]);
        store
            .create(&task_record(alice.id(), "lost__________________", 1, "working", &[]), TaskQuota::default())
            .await
            .unwrap()
            .unwrap();
        store
            .create(
                &task_record(alice.id(), "asking________________", 1, "input_required", &["a"]),
                TaskQuota::default(),
            )
            .await
            .unwrap()
            .unwrap();
        let mut long = task_record(alice.id(), "long__________________", 1, "working", &[]);
        long.round_limit_ms = Some(300_000);
        store.create(&long, TaskQuota::default()).await.unwrap().unwrap();
        let status = |task: &Map<String, Value>| task["status"].as_str().unwrap().to_owned();

        clock.advance_ms(90_000); // the round's 30 s and the 60 s margin
        assert_eq!(status(&service.get(&alice, "lost__________________", |_| Ok(())).await.unwrap()), "working");
        clock.advance_ms(1);
        let notified = service.notification(&alice, "lost__________________", |_| true).await.unwrap().unwrap();
        assert_eq!(status(&notified), "failed");
        let stored = store.get(alice.id(), "lost__________________").await.unwrap().unwrap();
        assert_eq!((stored.status, stored.version), (TaskStatus::Failed, 2));
        let message = stored.status_message.unwrap();
        assert!(message.starts_with("The task's work was lost") && message.contains("30 s"), "{message}");
        assert_eq!(stored.error.unwrap()["code"], -32603);
        assert_eq!(status(&service.get(&alice, "lost__________________", |_| Ok(())).await.unwrap()), "failed");
        assert_eq!(status(&service.get(&alice, "asking________________", |_| Ok(())).await.unwrap()), "input_required");
        assert_eq!(
            store.get(alice.id(), "asking________________").await.unwrap().unwrap().version,
            1,
            "left as it was"
        );

        // Started by an instance whose rounds may run 300 s: the reader's 30 s do not apply.
        assert_eq!(status(&service.get(&alice, "long__________________", |_| Ok(())).await.unwrap()), "working");
        clock.advance_ms(269_999); // at 360 s: its 300 s and the margin
        assert_eq!(status(&service.get(&alice, "long__________________", |_| Ok(())).await.unwrap()), "working");
        clock.advance_ms(1);
        let failed = service.get(&alice, "long__________________", |_| Ok(())).await.unwrap();
        assert_eq!(status(&failed), "failed");
        assert!(failed["statusMessage"].as_str().unwrap().contains("the 300 s a round may run"), "{failed:?}");
    }

    /// A task's create and its round run under the keeper of the request that started it (on
    /// Vercel, `wait_until`: the invocation stays open until the round ends, and the work goes
    /// on if the caller leaves): the keeper is handed them, and runs them, as the platform's does.
    #[tokio::test]
    async fn a_round_runs_under_the_keeper_of_its_request() {
        use crate::state::background::{Keeper, keeping};
        let store = Arc::new(store::MemoryTaskStore::default());
        let service = Arc::new(service_over(store.clone()));
        let handed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = handed.clone();
        let keeper: Keeper = Arc::new(move |work| into.lock().unwrap().push(tokio::spawn(work)));
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let task = NewTask { principal: &alice, tool: "done", arguments: Map::new(), client_capabilities: Map::new() };
        let created = keeping(keeper, service.start(task, finishing(), SpanHandle::default())).await.unwrap();
        let kept: Vec<_> = std::mem::take(&mut *handed.lock().unwrap());
        assert_eq!(kept.len(), 1, "the create and its round went to the keeper, as one piece of work");
        for work in kept {
            work.await.unwrap();
        }
        let task_id = created["taskId"].as_str().unwrap();
        assert_eq!(store.get(alice.id(), task_id).await.unwrap().unwrap().status, TaskStatus::Completed);
    }

    /// A store whose replacing writes fail `failures` times, then work; with `lands`, its
    /// creating and replacing writes are carried out but reported as failed (the reply lost).
    struct Blipping {
        inner: store::MemoryTaskStore,
        failures: std::sync::atomic::AtomicU32,
        lands: bool,
    }

    impl Blipping {
        fn fails_now(&self) -> bool {
            let left = self.failures.load(std::sync::atomic::Ordering::SeqCst);
            self.failures.store(left.saturating_sub(1), std::sync::atomic::Ordering::SeqCst);
            left > 0
        }
    }

    fn reset<T>() -> crate::store::StoreFuture<'static, T> {
        Box::pin(async { Err(StoreError::fault("task store unavailable: connection reset")) })
    }

    impl TaskStore for Blipping {
        fn create<'a>(
            &'a self,
            record: &'a TaskRecord,
            quota: TaskQuota,
        ) -> crate::store::StoreFuture<'a, Result<(), TaskRefused>> {
            if self.lands && self.fails_now() {
                drop(self.inner.create(record, quota));
                return reset();
            }
            self.inner.create(record, quota)
        }
        fn get<'a>(&'a self, owner: &'a str, task_id: &'a str) -> crate::store::StoreFuture<'a, Option<TaskRecord>> {
            self.inner.get(owner, task_id)
        }
        fn replace<'a>(&'a self, record: &'a TaskRecord) -> crate::store::StoreFuture<'a, bool> {
            if !self.fails_now() {
                return self.inner.replace(record);
            }
            if self.lands {
                drop(self.inner.replace(record));
            }
            reset()
        }
    }

    /// A write whose reply was lost, when the read that would tell whether it landed fails too,
    /// is still announced: its owner's listen streams look again, rather than hear of the change
    /// only at their periodic read of a working task.
    #[tokio::test]
    async fn a_write_that_may_have_landed_is_announced() {
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Replacing writes land and report a lost reply; the read after one fails.
        struct Unsure {
            inner: store::MemoryTaskStore,
            next_read_fails: AtomicBool,
        }
        impl TaskStore for Unsure {
            fn create<'a>(
                &'a self,
                record: &'a TaskRecord,
                quota: TaskQuota,
            ) -> crate::store::StoreFuture<'a, Result<(), TaskRefused>> {
                self.inner.create(record, quota)
            }
            fn get<'a>(&'a self, owner: &'a str, id: &'a str) -> crate::store::StoreFuture<'a, Option<TaskRecord>> {
                if self.next_read_fails.swap(false, Ordering::SeqCst) { reset() } else { self.inner.get(owner, id) }
            }
            fn replace<'a>(&'a self, record: &'a TaskRecord) -> crate::store::StoreFuture<'a, bool> {
                drop(self.inner.replace(record));
                self.next_read_fails.store(true, Ordering::SeqCst);
                reset()
            }
        }
        let store = Arc::new(Unsure { inner: Default::default(), next_read_fails: AtomicBool::new(false) });
        let bus = Arc::new(LocalBus::default());
        let service =
            TaskService::new(store.clone(), Arc::new(ManualClock::new(0)), Arc::new(SeededRandom::new(1)), bus.clone());
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let parked = task_record(alice.id(), "parked________________", 1, "input_required", &["a"]);
        store.inner.create(&parked, TaskQuota::default()).await.unwrap().unwrap();
        let mut changes = bus.subscribe();
        assert!(service.cancel(&alice, "parked________________", |_| Ok(())).await.is_err(), "the store could not say");
        let stored = store.inner.get(alice.id(), "parked________________").await.unwrap().unwrap();
        assert_eq!(stored.status, TaskStatus::Cancelled, "the write landed");
        match changes.try_recv() {
            Ok(ChangeEvent::TaskChanged { owner, task_id }) => {
                assert_eq!((owner.as_str(), task_id.as_str()), (alice.id(), "parked________________"));
            }
            other => panic!("no announcement: {other:?}"),
        }
    }

    /// A lost task whose failing write does not land is answered with the store's fault and left
    /// as it was, and the next read fails it.
    #[tokio::test]
    async fn a_lost_task_the_store_cannot_fail_stays_as_it_was() {
        let store = Arc::new(Blipping {
            inner: store::MemoryTaskStore::default(),
            failures: std::sync::atomic::AtomicU32::new(1),
            lands: false,
        });
        let (clock, service) = thirty_second_rounds(store.clone());
        let alice = Principal::verified(Some("alice"), None, vec![]);
        store
            .create(&task_record(alice.id(), "lost__________________", 1, "working", &[]), TaskQuota::default())
            .await
            .unwrap()
            .unwrap();
        clock.advance_ms(90_001);
        let refused = service.get(&alice, "lost__________________", |_| Ok(())).await.unwrap_err();
        assert_eq!(refused.code.0, -32603, "{}", refused.message);
        let unchanged = store.get(alice.id(), "lost__________________").await.unwrap().unwrap();
        assert_eq!((unchanged.status, unchanged.version), (TaskStatus::Working, 1));
        let failed = service.get(&alice, "lost__________________", |_| Ok(())).await.unwrap();
        assert_eq!(failed["status"], "failed");
    }

    /// A write that reported an error but landed: the update that resumed the task goes on to run
    /// it (a retry then resumes nothing, so the round runs once), and so does the start that
    /// created it. A write that did not land is still an error, and changes nothing.
    #[tokio::test(start_paused = true)]
    async fn a_write_that_landed_though_it_reported_an_error_goes_on() {
        let alice = Principal::verified(Some("alice"), None, vec![]);
        for lands in [true, false] {
            let store = Arc::new(Blipping { inner: Default::default(), failures: 0.into(), lands });
            let service = Arc::new(service_over(store.clone()));
            let parked = task_record(alice.id(), "parked________________", 1, "input_required", &["a"]);
            store.inner.create(&parked, TaskQuota::default()).await.unwrap().unwrap();
            store.failures.store(1, std::sync::atomic::Ordering::SeqCst);
            let updated = service.update(&alice, "parked________________", &answer("a")).await;
            let stored = store.get(alice.id(), "parked________________").await.unwrap().unwrap();
            if lands {
                let resumed = updated.unwrap().expect("the update that landed resumes the task");
                assert_eq!((resumed.record.status, stored.status), (TaskStatus::Working, TaskStatus::Working));
                assert!(
                    service.update(&alice, "parked________________", &answer("a")).await.unwrap().is_none(),
                    "resumed once"
                );
            } else {
                assert!(updated.unwrap_err().message.starts_with("task store unavailable"));
                assert_eq!((stored.status, stored.version), (TaskStatus::InputRequired, 1), "nothing changed");
            }
        }

        let store = Arc::new(Blipping { inner: Default::default(), failures: 1.into(), lands: true });
        let service = Arc::new(service_over(store.clone()));
        let task = NewTask { principal: &alice, tool: "done", arguments: Map::new(), client_capabilities: Map::new() };
        let created = service.start(task, finishing(), SpanHandle::default()).await.expect("the create landed");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let record = store.get(alice.id(), created["taskId"].as_str().unwrap()).await.unwrap().unwrap();
        assert_eq!(record.status, TaskStatus::Completed, "and its work ran");
    }

    /// A round that ends while the store blips is stored once it is back; one the store never
    /// takes is logged as a `task.fault`, and the task is left as it was.
    #[tokio::test(start_paused = true)]
    async fn a_finished_round_outlives_a_store_blip_and_a_lost_one_is_logged() {
        for (failures, stored) in [(SETTLE_ATTEMPTS - 1, TaskStatus::Completed), (u32::MAX, TaskStatus::Working)] {
            let (sink, clock) = (Arc::new(MemorySink::default()), Arc::new(ManualClock::new(0)));
            let random = Arc::new(SeededRandom::new(1));
            let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock.clone()).unwrap();
            let store = Arc::new(Blipping { inner: Default::default(), failures: failures.into(), lands: false });
            let service = Arc::new(
                TaskService::new(store.clone(), clock, random.clone(), Arc::new(LocalBus::default()))
                    .with_logger(Logger::new(sink.clone(), sealer, random)),
            );
            let alice = Principal::verified(Some("alice"), None, vec![]);
            let task =
                NewTask { principal: &alice, tool: "done", arguments: Map::new(), client_capabilities: Map::new() };
            let created = service.start(task, finishing(), SpanHandle::default()).await.unwrap();
            let task_id = created["taskId"].as_str().unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;

            let record = store.get(alice.id(), task_id).await.unwrap().unwrap();
            assert_eq!(record.status, stored, "after {failures} failed writes");
            let faults: Vec<Value> = sink.lines().into_iter().filter(|l| l["event"] == "task.fault").collect();
            if stored == TaskStatus::Completed {
                assert!(faults.is_empty(), "{faults:?}");
            } else {
                assert_eq!(faults.len(), 1, "one line for the lost round: {faults:?}");
                assert_eq!(faults[0]["operation"], "settle");
            }
        }
    }

    #[test]
    fn contention_is_an_answer_and_an_outage_a_logged_fault() {
        let (sink, clock) = (Arc::new(MemorySink::default()), Arc::new(ManualClock::new(0)));
        let random = Arc::new(SeededRandom::new(1));
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock.clone()).unwrap();
        let service =
            TaskService::new(Arc::new(UnconfiguredTaskStore), clock, random.clone(), Arc::new(LocalBus::default()))
                .with_logger(Logger::new(sink.clone(), sealer, random));
        let busy = service.store_fault("tasks.update")(contention());
        assert_eq!(busy.message, "the task is changing too fast; try again");
        assert!(sink.lines().is_empty(), "contention writes no fault line");
        let down = service.store_fault("tasks.update")(StoreError::fault("task store unavailable: IoError"));
        assert!(down.message.starts_with("task store unavailable: IoError (correlation id "), "{}", down.message);
        let lines = sink.lines();
        assert_eq!(lines.len(), 1);
        assert_eq!(
            (lines[0]["event"].as_str(), lines[0]["operation"].as_str()),
            (Some("task.fault"), Some("tasks.update"))
        );
        assert!(
            down.message.contains(lines[0]["correlationId"].as_str().unwrap()),
            "the caller can quote the log's id"
        );
    }

    /// A round whose work panicked fails its task with an error the caller can quote, and a
    /// `panic` line under the same id says where; the panic's record is taken, so a later panic
    /// elsewhere on the thread is not reported at this one's place.
    #[tokio::test]
    async fn a_round_that_panicked_fails_its_task_with_an_id_its_panic_line_carries() {
        crate::observe::install_panic_hook();
        let (sink, clock) = (Arc::new(MemorySink::default()), Arc::new(ManualClock::new(0)));
        let random = Arc::new(SeededRandom::new(1));
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock.clone()).unwrap();
        let service = Arc::new(
            TaskService::new(
                Arc::new(store::MemoryTaskStore::default()),
                clock,
                random.clone(),
                Arc::new(LocalBus::default()),
            )
            .with_logger(Logger::new(sink.clone(), sealer, random)),
        );
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let task = NewTask { principal: &alice, tool: "t", arguments: Map::new(), client_capabilities: Map::new() };
        let breaks: ToolFn = Arc::new(|_, _| Box::pin(async { panic!("the tool broke") }));
        let created = service.start(task, breaks, SpanHandle::default()).await.unwrap();
        let task_id = created["taskId"].as_str().unwrap().to_owned();
        let mut read = Map::new();
        for _ in 0..1000 {
            read = service.get(&alice, &task_id, |_| Ok(())).await.unwrap();
            if read["status"] == "failed" {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(read["status"], "failed", "{read:?}");
        let message = read["error"]["message"].as_str().unwrap();
        let panic = sink.lines().into_iter().find(|l| l["event"] == "panic").expect("a panic line");
        let id = panic["correlationId"].as_str().unwrap();
        assert_eq!(message, format!("Internal error (correlation id {id})"));
        assert!(panic["location"].as_str().unwrap().contains("src/tasks/mod.rs"), "{panic}");
        assert_eq!(crate::observe::take_panic_location(), None, "taken by the line");
    }

    /// A start whose create panicked, on the work it was handed to, answers with an error the
    /// caller can quote (a correlation id its `task.fault` line carries), not a bare one.
    #[tokio::test]
    async fn a_create_that_ended_without_answering_is_a_fault_with_an_id() {
        use crate::store::StoreFuture;
        struct Panics;
        impl TaskStore for Panics {
            fn create<'a>(&'a self, _: &'a TaskRecord, _: TaskQuota) -> StoreFuture<'a, Result<(), TaskRefused>> {
                Box::pin(async { panic!("the store's client broke") })
            }
            fn get<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
                Box::pin(async { Ok(None) })
            }
            fn replace<'a>(&'a self, _: &'a TaskRecord) -> StoreFuture<'a, bool> {
                Box::pin(async { Ok(false) })
            }
        }
        let (sink, clock) = (Arc::new(MemorySink::default()), Arc::new(ManualClock::new(0)));
        let random = Arc::new(SeededRandom::new(1));
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock.clone()).unwrap();
        let service = Arc::new(
            TaskService::new(Arc::new(Panics), clock, random.clone(), Arc::new(LocalBus::default()))
                .with_logger(Logger::new(sink.clone(), sealer, random)),
        );
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let task = NewTask { principal: &alice, tool: "t", arguments: Map::new(), client_capabilities: Map::new() };
        let error = service.start(task, finishing(), SpanHandle::default()).await.unwrap_err();
        let fault = sink.lines().into_iter().find(|l| l["event"] == "task.fault").expect("a task.fault line");
        assert_eq!(fault["operation"], "create");
        assert!(error.message.contains(fault["correlationId"].as_str().unwrap()), "{}", error.message);
    }

    /// However many reads listen streams ask for at once, at most [`WATCHED_READS_AT_ONCE`] are
    /// at the store together, and at most [`WATCHED_READS_PER_CALLER`] of one caller's: a caller
    /// asking for one read after five others asked for 64 each waits one turn, not five. The
    /// rest wait their turn, and every one is made.
    #[tokio::test(start_paused = true)]
    async fn listen_reads_of_tasks_are_bounded_for_the_whole_service_and_shared_by_callers() {
        use std::sync::atomic::Ordering;
        let store = Arc::new(store::SlowReads::new(Duration::from_secs(1)));
        let clock = Arc::new(ManualClock::new(0));
        let service =
            TaskService::new(store.clone(), clock, Arc::new(SeededRandom::new(1)), Arc::new(LocalBus::default()));
        let busy: Vec<Principal> =
            (0..5).map(|n| Principal::verified(Some(&format!("busy-{n}")), None, vec![])).collect();
        let bob = Principal::verified(Some("bob"), None, vec![]);
        let ids: Vec<String> = (0..64).map(|n| format!("task-{n:0>17}")).collect();
        // Every busy caller's reads are asked for before bob's one.
        let asked: Vec<(&Principal, &String)> =
            busy.iter().flat_map(|caller| ids.iter().map(move |id| (caller, id))).chain([(&bob, &ids[0])]).collect();
        // Unconstrained by the runtime's budget, which would otherwise have the 129th poll in a
        // row yield before it takes a place in a queue.
        let mut reads: Vec<_> = asked
            .iter()
            .map(|(caller, id)| Box::pin(tokio::task::unconstrained(service.watched(caller, id, |_| true))))
            .collect();
        let started = tokio::time::Instant::now();
        // Each read takes its place in the order asked, before any is made.
        for read in &mut reads {
            assert!(futures_util::poll!(read.as_mut()).is_pending());
        }
        let read = futures_util::future::join_all(reads).await;
        assert!(read.iter().all(|r| matches!(r, Ok(None))));
        assert_eq!(store.reads.load(Ordering::SeqCst), asked.len(), "every read was made");
        assert_eq!(store.peak.load(Ordering::SeqCst), WATCHED_READS_AT_ONCE);
        let reads = store.started.lock().unwrap().clone();
        // Each read lasts one second, so the reads at the store together are those started at once.
        let mut together: std::collections::HashMap<(String, u64), usize> = Default::default();
        for (owner, at) in &reads {
            *together.entry((owner.clone(), (*at - started).as_secs())).or_default() += 1;
        }
        let (_, bob_at) = reads.iter().find(|(owner, _)| owner == bob.id()).expect("bob's read");
        assert!(
            *bob_at - started <= Duration::from_secs(1),
            "bob's read waited {:?} behind the busy callers' reads",
            *bob_at - started
        );
        assert_eq!(together.values().max(), Some(&WATCHED_READS_PER_CALLER), "one caller's at once");
    }
}
