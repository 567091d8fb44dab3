//! `subscriptions/listen`: one long-lived SSE stream per request, fed by the change bus.
//!
//! The acknowledgement is the first message and echoes only what this server will honour.
//! The bus subscription is taken before the acknowledgement goes out, so no change made after
//! the client sees the acknowledgement can be missed. The stream ends gracefully with the
//! listen result before the platform's `maxDuration` would cut it.

use serde_json::{Map, Value, json};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

use super::{McpServer, RequestContext};
use crate::body::StreamEvent;
use crate::protocol::params::RequestParams;
use crate::protocol::{McpError, TASKS_EXTENSION, jsonrpc, meta};
use crate::security::{Slot, SlotCaps, Slots};
use crate::state::ChangeEvent;
use std::sync::Arc;

/// Timing of a listen stream.
#[derive(Clone, Copy, Debug)]
pub struct ListenLimits {
    /// When to close gracefully.
    pub max_duration: Duration,
    /// How often an open stream sends a keep-alive comment (the transport's timer beside the
    /// stream's work, so it beats while a delivery or a catch-up waits on the store too).
    pub keep_alive: Duration,
}

impl ListenLimits {
    /// These limits for a stream whose caller's credential stays valid `credential` longer
    /// ([`crate::security::Authenticator::credential_remaining`]): the stream closes gracefully
    /// by then, and its client comes back with a fresh token, as for any other request. An
    /// expired token is refused before a stream opens; one that expires while it is open no
    /// longer keeps notifications coming.
    pub fn within(self, credential: Option<Duration>) -> Self {
        let max_duration = credential.map_or(self.max_duration, |left| left.min(self.max_duration));
        Self { max_duration, ..self }
    }
}

/// How long a stream waits to read again a task it could not read (the store failed).
const UNREAD_RETRY: Duration = Duration::from_secs(1);
/// How many of a stream's named tasks are read at once. The store's one connection pipelines
/// them, so a stream naming many tasks opens (and catches up) in a few round trips rather than
/// one per task, and one stream's reads still leave room on that connection for other requests.
const TASK_READS_AT_ONCE: usize = 16;
/// The longest resource URI a stream may subscribe to (a filter holds at most 256 of them, and
/// its acknowledgement repeats them).
const MAX_SUBSCRIPTION_URI_BYTES: usize = 2048;

/// How many listen streams may be open at once in one instance: per caller (the anonymous
/// caller is one caller), and in all.
pub type ListenCaps = SlotCaps;

/// The default caps on listen streams.
pub const DEFAULT_LISTEN_CAPS: ListenCaps = SlotCaps { per_principal: 16, total: 512 };

/// Takes a listen slot for `principal`, held for as long as its stream's work lives (the
/// response body owns it, so it is given back however the stream ends), or the 429 that says
/// which cap is reached. A listen stream holds one, and so does a 2025 call waiting for its
/// client's answer, which keeps its stream open as long: the message names both.
pub(crate) fn listen_slot(slots: &Arc<Slots>, principal: &str, caps: ListenCaps) -> Result<Slot, McpError> {
    slots.acquire(principal, caps).map_err(|full| {
        full.too_many_requests(
            caps,
            [
                "Too many open streams (subscriptions/listen streams, and calls waiting for your answer, count alike) \
                 on this server",
                "try again later",
            ],
            [
                "Too many open streams (subscriptions/listen streams, and calls waiting for your answer, count alike) \
                 for this caller",
                "close one first",
            ],
        )
    })
}

/// The notification kinds one listen request asked for, reduced to what is honoured.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    resource_uris: Vec<String>,
    task_ids: Vec<String>,
}

impl Filter {
    fn wants(&self, event: &ChangeEvent) -> bool {
        match event {
            ChangeEvent::ToolsListChanged => self.tools,
            ChangeEvent::PromptsListChanged => self.prompts,
            ChangeEvent::ResourcesListChanged => self.resources,
            ChangeEvent::ResourceUpdated(uri) => self.resource_uris.iter().any(|u| u == uri),
            ChangeEvent::TaskChanged { task_id, .. } => self.task_ids.iter().any(|t| t == task_id),
        }
    }

    /// One change of every list and resource this filter wants, to catch up a stream that may
    /// have missed some (its named tasks are read again beside these).
    fn list_and_resource_changes(&self) -> Vec<ChangeEvent> {
        let lists = [
            (self.tools, ChangeEvent::ToolsListChanged),
            (self.prompts, ChangeEvent::PromptsListChanged),
            (self.resources, ChangeEvent::ResourcesListChanged),
        ];
        let lists = lists.into_iter().filter_map(|(wanted, event)| wanted.then_some(event));
        let resources = self.resource_uris.iter().cloned().map(ChangeEvent::ResourceUpdated);
        lists.chain(resources).collect()
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        if self.tools {
            out.insert("toolsListChanged".into(), json!(true));
        }
        if self.prompts {
            out.insert("promptsListChanged".into(), json!(true));
        }
        if self.resources {
            out.insert("resourcesListChanged".into(), json!(true));
        }
        if !self.resource_uris.is_empty() {
            out.insert("resourceSubscriptions".into(), json!(self.resource_uris));
        }
        if !self.task_ids.is_empty() {
            out.insert("taskIds".into(), json!(self.task_ids));
        }
        Value::Object(out)
    }
}

impl McpServer {
    /// Validates a listen request and returns the honoured filter. Runs before the stream
    /// opens, so a bad filter still gets an HTTP error status.
    pub(crate) fn listen_filter(&self, ctx: &RequestContext, params: &RequestParams) -> Result<Filter, McpError> {
        let requested = match params.get("notifications") {
            None | Some(Value::Null) => return Ok(Filter::default()),
            Some(Value::Object(n)) => n,
            Some(_) => return Err(McpError::invalid_params("notifications must be an object")),
        };
        let flag = |key: &str| match requested.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(McpError::invalid_params(format!("notifications.{key} must be a boolean"))),
        };
        let uris = match requested.get("resourceSubscriptions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) if items.len() <= 256 => items
                .iter()
                .map(|u| u.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| McpError::invalid_params("resourceSubscriptions must be strings"))?,
            Some(_) => {
                return Err(McpError::invalid_params("resourceSubscriptions must be an array of at most 256 URIs"));
            }
        };
        let task_ids = match requested.get("taskIds") {
            None | Some(Value::Null) => Vec::new(),
            Some(_) if !ctx.has_extension(TASKS_EXTENSION) => {
                return Err(McpError::missing_capability(
                    "taskIds requires the io.modelcontextprotocol/tasks extension",
                    json!({ "extensions": { TASKS_EXTENSION: {} } }),
                ));
            }
            Some(Value::Array(items)) if items.len() <= 256 => items
                .iter()
                .map(|t| t.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| McpError::invalid_params("taskIds must be strings"))?,
            Some(_) => return Err(McpError::invalid_params("taskIds must be an array of at most 256 ids")),
        };
        if uris.iter().any(|uri| uri.len() > MAX_SUBSCRIPTION_URI_BYTES) {
            return Err(McpError::invalid_params(format!(
                "each of resourceSubscriptions is at most {MAX_SUBSCRIPTION_URI_BYTES} bytes"
            )));
        }
        // Each at most once: a stream's catch-up reads each task once, however often it is named.
        let (mut uris, mut task_ids) = (once_each(uris), once_each(task_ids));
        // An id this server could not have minted names no task: not honoured, so never read.
        task_ids.retain(|id| crate::tasks::is_task_id(id));
        // A resource the caller may not read is not watched for it either: when it changes says
        // something of it. Left out of the acknowledgement, as any subscription not honoured.
        uris.retain(|uri| self.missing_resource_scopes(&ctx.principal, uri).is_none());
        let resources = !self.resources.is_empty() || !self.templates.is_empty();
        Ok(Filter {
            tools: flag("toolsListChanged")? && !self.tools.is_empty(),
            prompts: flag("promptsListChanged")? && !self.prompts.is_empty(),
            resources: flag("resourcesListChanged")? && resources,
            resource_uris: if resources { uris } else { Vec::new() },
            task_ids: if self.tasks.is_some() { task_ids } else { Vec::new() },
        })
    }

    /// Runs the stream: acknowledgement and matching notifications (the transport adds the
    /// keep-alives), then the graceful result once `limits.max_duration` has passed, or at once
    /// when the process begins `stopping`. Returns early (with no result to send) when the
    /// client closes the stream.
    pub(crate) async fn listen(
        &self,
        ctx: &RequestContext,
        filter: Filter,
        limits: ListenLimits,
        stopping: &crate::state::Stopping,
    ) -> Option<Map<String, Value>> {
        let outbox = ctx.outbox.as_ref()?;
        let tag = json!({ meta::SUBSCRIPTION_ID: ctx.id.as_value() });
        let mut changes = ctx.bus.subscribe();
        ctx.bus.ready().await;
        // Taken as soon as the bus is ready: the subscriptions counted so far are ones this
        // stream saw (or gave up waiting for, when `ready` timed out: then the next one counts).
        let mut losses = ctx.bus.losses();
        if let Some(losses) = &mut losses {
            losses.borrow_and_update();
        }
        let ack = jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            &json!({ "_meta": tag, "notifications": filter.to_json() }),
        );
        outbox.send(StreamEvent::Notification(ack)).await.ok()?;
        // The deadline bounds the reads a delivery or a catch-up makes too (a store that answers
        // slowly, many tasks): past it, the stream ends with its result before the function's
        // maxDuration would cut it.
        let ends_at = tokio::time::Instant::now() + limits.max_duration;
        let deadline = tokio::time::sleep_until(ends_at);
        tokio::pin!(deadline);
        // Armed when a task could not be read for the stream (the store failed): it catches up
        // again a second later, so a task's final state is not lost to a store blip. Also armed,
        // a moment ahead, to catch up after the bus reconnects.
        let unread = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(unread);
        let mut unread_armed = false;
        // A stopping process ends the stream as its deadline would: the client gets the result,
        // and opens its next stream on another instance.
        let stopped = stopping.begun();
        tokio::pin!(stopped);
        // The named tasks: what the stream last sent of each (a state is sent once, however many
        // changes or catch-ups read it), and when each is read next. They are read once the
        // stream is open, so a change that fell between the client's last stream and this one
        // is not missed; and each working one again when it would count as lost, since a task
        // whose instance died is announced by nobody (that read fails it, and sends that).
        let mut seen = TaskWatch::default();
        if self.tasks.is_some() {
            let now = tokio::time::Instant::now();
            seen.due.extend(filter.task_ids.iter().map(|id| (id.clone(), now)));
        }
        let task_check = tokio::time::sleep_until(seen.next().unwrap_or(ends_at));
        tokio::pin!(task_check);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                () = &mut stopped => break,
                _ = outbox.closed() => return None,
                change = changes.recv() => match change {
                    Ok(event) if filter.wants(&event) => {
                        let Ok(delivered) = tokio::time::timeout_at(ends_at, self.deliver(ctx, &event, &tag, outbox, &mut seen)).await else { break };
                        unread_armed |= retry_unread(unread.as_mut(), delivered.ok()?);
                        task_check.as_mut().reset(seen.next().unwrap_or(ends_at));
                    }
                    Ok(_) => {}
                    // The bus moved on before this stream read some changes (the client reads
                    // slowly, or many changes came at once), and which ones is unknown.
                    Err(RecvError::Lagged(_)) => {
                        let Ok(caught_up) = tokio::time::timeout_at(ends_at, self.catch_up(ctx, &filter, &tag, outbox, &mut seen)).await else { break };
                        unread_armed |= retry_unread(unread.as_mut(), caught_up.ok()?);
                        task_check.as_mut().reset(seen.next().unwrap_or(ends_at));
                    }
                    Err(RecvError::Closed) => break,
                },
                () = &mut task_check, if !seen.due.is_empty() => {
                    // Reads that a store answering slowly draws out still give way to the end
                    // of the stream, the process stopping, and the client leaving.
                    tokio::select! {
                        biased;
                        _ = outbox.closed() => return None,
                        () = &mut stopped => break,
                        read = tokio::time::timeout_at(ends_at, self.read_due_tasks(ctx, &filter, &tag, outbox, &mut seen)) => {
                            let Ok(read) = read else { break };
                            read.ok()?;
                        }
                    }
                    task_check.as_mut().reset(seen.next().unwrap_or(ends_at));
                },
                () = &mut unread, if unread_armed => {
                    let Ok(caught_up) = tokio::time::timeout_at(ends_at, self.catch_up(ctx, &filter, &tag, outbox, &mut seen)).await else { break };
                    unread_armed = retry_unread(unread.as_mut(), caught_up.ok()?);
                    task_check.as_mut().reset(seen.next().unwrap_or(ends_at));
                },
                // The bus lost its link to the other instances for a while: what they changed
                // meanwhile never arrived.
                lost = async {
                    match &mut losses {
                        Some(losses) => losses.changed().await,
                        None => std::future::pending().await,
                    }
                } => match lost {
                    // Every stream of the instance hears of it at once: each catches up at a
                    // random moment within the next second, so Redis, just back, is not asked
                    // for every stream's tasks at the same instant.
                    Ok(()) => {
                        unread.as_mut().reset(tokio::time::Instant::now() + spread_over(RECONNECT_SPREAD));
                        unread_armed = true;
                    }
                    Err(_) => losses = None,
                },
            }
        }
        let mut result = Map::new();
        result.insert("_meta".into(), tag);
        Some(result)
    }
}

impl McpServer {
    /// Catches up a stream that may have missed changes it cannot name: every notification its
    /// filter honours is sent once. A needless one costs the client a re-read; a missed one
    /// leaves it stale, waiting on a task that finished, say. False when a task could not be
    /// read.
    async fn catch_up(
        &self,
        ctx: &RequestContext,
        filter: &Filter,
        tag: &Value,
        outbox: &crate::body::Outbox,
        seen: &mut TaskWatch,
    ) -> Result<bool, crate::body::outbox::Closed> {
        for event in filter.list_and_resource_changes() {
            self.deliver(ctx, &event, tag, outbox, seen).await?;
        }
        let unread = self.deliver_tasks(ctx, filter.task_ids.clone(), tag, outbox, seen).await?;
        Ok(unread.is_empty())
    }

    /// Reads the named tasks whose read is due, and sends what changed ([`McpServer::deliver_tasks`]),
    /// in the order `filter` names them; one that could not be read is read again after
    /// [`UNREAD_RETRY`].
    async fn read_due_tasks(
        &self,
        ctx: &RequestContext,
        filter: &Filter,
        tag: &Value,
        outbox: &crate::body::Outbox,
        seen: &mut TaskWatch,
    ) -> Result<(), crate::body::outbox::Closed> {
        let now = tokio::time::Instant::now();
        let is_due = |task_id: &&String| seen.due.get(*task_id).is_some_and(|at| *at <= now);
        let due: Vec<String> = filter.task_ids.iter().filter(is_due).cloned().collect();
        for task_id in self.deliver_tasks(ctx, due, tag, outbox, seen).await? {
            seen.due.insert(task_id, tokio::time::Instant::now() + UNREAD_RETRY);
        }
        Ok(())
    }

    /// Reads `ctx`'s caller's tasks `task_ids` ([`TASK_READS_AT_ONCE`] at a time) and sends, in
    /// the order named, each one's full state when it is not what the stream last sent of it.
    /// Read now, so it is the latest; only tasks of tools the stream's token may call, as
    /// `tasks/get` answers; a working task is read again when it would count as lost. Returns
    /// the ids that could not be read (the store failed).
    ///
    /// Each group of reads is finished before any of its states is sent: a send waits while the
    /// client is not reading, and a read left unfinished meanwhile would keep its caller's turn
    /// at the store ([`crate::tasks::WATCHED_READS_PER_CALLER`]) from its other streams.
    async fn deliver_tasks(
        &self,
        ctx: &RequestContext,
        task_ids: Vec<String>,
        tag: &Value,
        outbox: &crate::body::Outbox,
        seen: &mut TaskWatch,
    ) -> Result<Vec<String>, crate::body::outbox::Closed> {
        let Some(tasks) = self.tasks.as_ref() else { return Ok(Vec::new()) };
        let may_see = |tool: &str| self.missing_tool_scopes(&ctx.principal, tool).is_none();
        let mut unread = Vec::new();
        for group in task_ids.chunks(TASK_READS_AT_ONCE) {
            let reads = group.iter().map(|task_id| tasks.watched(&ctx.principal, task_id, &may_see));
            for (task_id, read) in group.iter().zip(futures_util::future::join_all(reads).await) {
                match read {
                    Ok(Some(watched)) => {
                        seen.read(task_id, watched.lost_in);
                        let mut params = watched.params;
                        params.insert("_meta".into(), tag.clone());
                        let message = jsonrpc::notification("notifications/tasks", &params);
                        if seen.is_new(task_id, &message) {
                            outbox.send(StreamEvent::Notification(message)).await?;
                        }
                    }
                    Ok(None) => seen.forget(task_id),
                    Err(_) => unread.push(task_id.clone()),
                }
            }
        }
        Ok(unread)
    }

    /// Sends what a wanted change becomes on `ctx`'s stream, if anything: a task's state for its
    /// owner's streams only ([`McpServer::deliver_tasks`]), a list or resource change as it is.
    /// False when the task could not be read (the store failed).
    async fn deliver(
        &self,
        ctx: &RequestContext,
        event: &ChangeEvent,
        tag: &Value,
        outbox: &crate::body::Outbox,
        seen: &mut TaskWatch,
    ) -> Result<bool, crate::body::outbox::Closed> {
        let message = match event {
            ChangeEvent::TaskChanged { owner, task_id } => {
                if owner != ctx.principal.id() {
                    return Ok(true);
                }
                let unread = self.deliver_tasks(ctx, vec![task_id.clone()], tag, outbox, seen).await?;
                return Ok(unread.is_empty());
            }
            other => match notification_for(other, tag) {
                Some(message) => message,
                None => return Ok(true),
            },
        };
        outbox.send(StreamEvent::Notification(message)).await?;
        Ok(true)
    }
}

/// What a listen stream knows of its named tasks.
#[derive(Default)]
struct TaskWatch {
    /// When each is read next: at once when the stream opens, then a working one when it would
    /// count as lost.
    due: std::collections::HashMap<String, tokio::time::Instant>,
    /// A digest of the notification last sent of each.
    sent: std::collections::HashMap<String, u64>,
}

impl TaskWatch {
    /// When the next read is due.
    fn next(&self) -> Option<tokio::time::Instant> {
        self.due.values().min().copied()
    }

    /// `task_id` was just read: working, it is read again when it would count as lost.
    fn read(&mut self, task_id: &str, lost_in: Option<Duration>) {
        match lost_in {
            Some(wait) => {
                self.due.insert(task_id.to_owned(), tokio::time::Instant::now() + wait);
            }
            None => {
                self.due.remove(task_id);
            }
        }
    }

    /// Whether `message` about `task_id` differs from the last one sent (and then it is the last).
    fn is_new(&mut self, task_id: &str, message: &[u8]) -> bool {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let digest = BuildHasherDefault::<DefaultHasher>::default().hash_one(message);
        self.sent.insert(task_id.to_owned(), digest) != Some(digest)
    }

    /// `task_id` is not there (or not the stream's to see): nothing more to read or compare.
    fn forget(&mut self, task_id: &str) {
        self.due.remove(task_id);
        self.sent.remove(task_id);
    }
}

/// `items` without repeats, in their first order.
fn once_each(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    items.into_iter().filter(|item| seen.insert(item.clone())).collect()
}

/// How long after a reconnect the streams of an instance spread their catch-ups over.
const RECONNECT_SPREAD: Duration = Duration::from_secs(1);

/// A random part of `window` (std's per-process random hash keys are enough to spread load).
fn spread_over(window: Duration) -> Duration {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    window.mul_f64((random % 1024) as f64 / 1024.0)
}

/// Sets the stream to read again in [`UNREAD_RETRY`] when not `all_read`; whether it is set.
fn retry_unread(unread: std::pin::Pin<&mut tokio::time::Sleep>, all_read: bool) -> bool {
    if !all_read {
        unread.reset(tokio::time::Instant::now() + UNREAD_RETRY);
    }
    !all_read
}

fn notification_for(event: &ChangeEvent, tag: &Value) -> Option<Vec<u8>> {
    Some(match event {
        ChangeEvent::ToolsListChanged => {
            jsonrpc::notification("notifications/tools/list_changed", &json!({ "_meta": tag }))
        }
        ChangeEvent::PromptsListChanged => {
            jsonrpc::notification("notifications/prompts/list_changed", &json!({ "_meta": tag }))
        }
        ChangeEvent::ResourcesListChanged => {
            jsonrpc::notification("notifications/resources/list_changed", &json!({ "_meta": tag }))
        }
        ChangeEvent::ResourceUpdated(uri) => {
            jsonrpc::notification("notifications/resources/updated", &json!({ "_meta": tag, "uri": uri }))
        }
        ChangeEvent::TaskChanged { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreFuture;
    use crate::tasks::{MemoryTaskStore, TaskQuota, TaskRecord, TaskRefused, TaskStore};
    use std::sync::Arc;

    /// A memory store whose every read first awaits `before` (a store across a network, or one
    /// that answers only once enough reads wait), counting its reads.
    struct ReadsAfter<F> {
        records: MemoryTaskStore,
        before: F,
        reads: std::sync::atomic::AtomicUsize,
    }

    /// A server with the tasks extension over `tasks`, serving the tool `work` that the tests'
    /// task records name.
    fn serving_work(tasks: Arc<crate::tasks::TaskService>) -> McpServer {
        let mut server = McpServer::new("t", "1");
        server.enable_tasks(tasks);
        server
            .tool(crate::server::ToolDef::new("work").description("Works"), |_, _: crate::server::NoArguments| async {
                crate::protocol::types::CallToolResult::text("")
            });
        server
    }

    /// `principal`'s listen request declaring the tasks extension, its outbox holding at most
    /// `capacity` unread events, and the filter naming `task_ids`.
    fn listening_to(
        server: &McpServer,
        principal: &crate::security::Principal,
        bus: Arc<crate::state::LocalBus>,
        capacity: usize,
        task_ids: &[String],
    ) -> (RequestContext, crate::body::outbox::Events, Filter) {
        let id = crate::protocol::RequestId::from_value(json!("L")).unwrap();
        let mut ctx = RequestContext::new(id, crate::protocol::Era::Modern, principal.clone(), bus);
        ctx.client_capabilities = json!({"extensions": {TASKS_EXTENSION: {}}}).as_object().unwrap().clone();
        let (outbox, events) = crate::body::outbox::channel(capacity);
        ctx.outbox = Some(outbox);
        let params: RequestParams = serde_json::from_value(json!({"notifications": {"taskIds": task_ids}})).unwrap();
        let filter = server.listen_filter(&ctx, &params).unwrap();
        (ctx, events, filter)
    }

    /// Stores a completed task of the tool `work` for each of `task_ids`, owned by `owner`.
    async fn completed_tasks(store: &MemoryTaskStore, owner: &crate::security::Principal, task_ids: &[String]) {
        for task_id in task_ids {
            let record: TaskRecord = serde_json::from_value(json!({
                "version": 1, "taskId": task_id, "owner": owner.id(), "ownerVerified": true, "ownerScopes": [],
                "tool": "work", "arguments": {}, "status": "completed", "createdAt": 0, "updatedAt": 0,
                "ttlMs": 3_600_000, "roundLimitMs": 1_000
            }))
            .unwrap();
            store.create(&record, TaskQuota::default()).await.unwrap().unwrap();
        }
    }

    impl<F> ReadsAfter<F> {
        fn new(before: F) -> Self {
            Self { records: MemoryTaskStore::default(), before, reads: Default::default() }
        }
    }

    impl<F, Fut> TaskStore for ReadsAfter<F>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        fn create<'a>(&'a self, record: &'a TaskRecord, quota: TaskQuota) -> StoreFuture<'a, Result<(), TaskRefused>> {
            self.records.create(record, quota)
        }
        fn get<'a>(&'a self, owner: &'a str, task_id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
            Box::pin(async move {
                self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                (self.before)().await;
                self.records.get(owner, task_id).await
            })
        }
        fn replace<'a>(&'a self, record: &'a TaskRecord) -> StoreFuture<'a, bool> {
            self.records.replace(record)
        }
    }

    /// A stream's reads of its named tasks that cannot finish before its deadline (a store
    /// answering slowly, many tasks) do not hold the stream past it: the result comes at the
    /// deadline. The reads are made [`TASK_READS_AT_ONCE`] at a time, never more, and a task
    /// named twice is read once.
    #[tokio::test(start_paused = true)]
    async fn slow_task_reads_are_cut_at_the_deadline_and_made_a_few_at_a_time() {
        use crate::state::{LocalBus, ManualClock, SeededRandom};
        use crate::tasks::TaskService;
        use std::sync::atomic::Ordering;
        let store = Arc::new(crate::tasks::store::SlowReads::new(Duration::from_secs(10)));
        let bus = Arc::new(LocalBus::default());
        let clock = Arc::new(ManualClock::new(0));
        let tasks = TaskService::new(store.clone(), clock, Arc::new(SeededRandom::new(1)), bus.clone());
        let mut server = McpServer::new("t", "1");
        server.enable_tasks(Arc::new(tasks));
        let alice = crate::security::Principal::verified(Some("alice"), None, vec![]);
        let id = crate::protocol::RequestId::from_value(json!("L")).unwrap();
        let mut ctx = RequestContext::new(id, crate::protocol::Era::Modern, alice.clone(), bus.clone());
        ctx.client_capabilities = json!({"extensions": {TASKS_EXTENSION: {}}}).as_object().unwrap().clone();
        let (outbox, _events) = crate::body::outbox::channel(1024);
        ctx.outbox = Some(outbox);
        // A hundred tasks, each named twice: reading them takes seven rounds of ten seconds.
        let named: Vec<String> = (0..200).map(|n| format!("task-{:0>17}", n % 100)).collect();
        let params: RequestParams = serde_json::from_value(json!({"notifications": {"taskIds": named}})).unwrap();
        let filter = server.listen_filter(&ctx, &params).unwrap();
        assert_eq!(filter.task_ids.len(), 100, "each task once");
        let limits = ListenLimits { max_duration: Duration::from_secs(35), keep_alive: Duration::from_secs(15) };
        let started = tokio::time::Instant::now();
        let stopping = crate::state::Stopping::default();
        assert!(server.listen(&ctx, filter, limits, &stopping).await.is_some(), "the stream ends with its result");
        assert_eq!(started.elapsed(), Duration::from_secs(35), "it ended at its deadline");
        // Rounds of 16 began at 0, 10, 20 and 30 s; the fourth was cut at 35 s.
        assert_eq!(store.reads.load(Ordering::SeqCst), 4 * TASK_READS_AT_ONCE);
        assert_eq!(store.peak.load(Ordering::SeqCst), TASK_READS_AT_ONCE, "never more at once");
    }

    /// A stream naming many tasks reads them together, not one after another: a store that
    /// answers no read until eight are waiting answers all of them at once, and the stream
    /// sends their states in the order named, right after it opens.
    #[tokio::test(start_paused = true)]
    async fn a_stream_reads_its_named_tasks_together_and_sends_them_in_order() {
        use crate::state::{LocalBus, ManualClock, SeededRandom};
        use crate::tasks::TaskService;
        const NAMED: usize = 8;
        // Reads wait until `NAMED` of them are waiting.
        let waiting = Arc::new(tokio::sync::Barrier::new(NAMED));
        let store = Arc::new(ReadsAfter::new(move || {
            let waiting = waiting.clone();
            async move {
                waiting.wait().await;
            }
        }));
        let alice = crate::security::Principal::verified(Some("alice"), None, vec![]);
        // Named from last to first, so that the order sent is the order named, not the store's.
        let named: Vec<String> = (0..NAMED).rev().map(|n| format!("task-{n:0>17}")).collect();
        completed_tasks(&store.records, &alice, &named).await;
        let bus = Arc::new(LocalBus::default());
        let tasks =
            TaskService::new(store.clone(), Arc::new(ManualClock::new(0)), Arc::new(SeededRandom::new(1)), bus.clone());
        let server = serving_work(Arc::new(tasks));
        let (ctx, mut events, filter) = listening_to(&server, &alice, bus, 1024, &named);
        let limits = ListenLimits { max_duration: Duration::from_secs(30), keep_alive: Duration::from_secs(15) };
        let stopping = crate::state::Stopping::default();
        let listening = server.listen(&ctx, filter, limits, &stopping);
        tokio::pin!(listening);
        // The stream is open: its acknowledgement, then one notification per task.
        let mut sent = String::new();
        let opened = tokio::time::Instant::now();
        while sent.matches("notifications/tasks").count() < NAMED {
            tokio::select! {
                chunk = std::future::poll_fn(|cx| events.poll_chunk(cx)) => {
                    let (chunk, _) = chunk.expect("the stream's events");
                    sent.push_str(std::str::from_utf8(&chunk).unwrap());
                }
                _ = &mut listening => panic!("the stream ended before it sent every task; it sent {sent}"),
            }
        }
        assert!(opened.elapsed() < Duration::from_secs(1), "sent after {:?}", opened.elapsed());
        let order: Vec<String> = sent
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap())
            .filter(|message| message["method"] == "notifications/tasks")
            .map(|message| message["params"]["taskId"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(order, named, "each task once, in the order named");
    }

    /// A stream whose client stops reading holds none of its caller's turns at the store while
    /// it waits to send: its reads of a group are finished before the group is sent, so the
    /// caller's other streams read on. When the client reads again, every state follows, in
    /// the order named.
    #[tokio::test(start_paused = true)]
    async fn a_stream_waiting_for_its_client_holds_no_turn_at_the_store() {
        use crate::state::{LocalBus, ManualClock, SeededRandom};
        use crate::tasks::TaskService;
        use std::sync::atomic::Ordering;
        const NAMED: usize = 40;
        // Reads take 10 ms, as a store across a network does.
        let store = Arc::new(ReadsAfter::new(|| tokio::time::sleep(Duration::from_millis(10))));
        let alice = crate::security::Principal::verified(Some("alice"), None, vec![]);
        let named: Vec<String> = (0..NAMED).map(|n| format!("task-{n:0>17}")).collect();
        completed_tasks(&store.records, &alice, &named).await;
        let bus = Arc::new(LocalBus::default());
        let tasks = Arc::new(TaskService::new(
            store.clone(),
            Arc::new(ManualClock::new(0)),
            Arc::new(SeededRandom::new(1)),
            bus.clone(),
        ));
        let server = serving_work(tasks.clone());
        // Room for one unread event: the client reads nothing until told.
        let (ctx, mut events, filter) = listening_to(&server, &alice, bus, 1, &named);
        let limits = ListenLimits { max_duration: Duration::from_secs(30), keep_alive: Duration::from_secs(15) };
        let stopping = crate::state::Stopping::default();
        let listening = server.listen(&ctx, filter, limits, &stopping);
        tokio::pin!(listening);
        let waited = tokio::time::timeout(Duration::from_secs(5), &mut listening).await;
        assert!(waited.is_err(), "the stream is open, waiting for its client");
        assert_eq!(store.reads.load(Ordering::SeqCst), TASK_READS_AT_ONCE, "one group read, then a send waits");
        assert_eq!(tasks.callers_reading(), 0, "no read holds a turn while the stream waits for its client");
        let mut sent = String::new();
        while sent.matches("notifications/tasks").count() < NAMED {
            tokio::select! {
                chunk = std::future::poll_fn(|cx| events.poll_chunk(cx)) => {
                    let (chunk, _) = chunk.expect("the stream's events");
                    sent.push_str(std::str::from_utf8(&chunk).unwrap());
                }
                _ = &mut listening => panic!("the stream ended before it sent every task; it sent {sent}"),
            }
        }
        let order: Vec<String> = sent
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap())
            .filter(|message| message["method"] == "notifications/tasks")
            .map(|message| message["params"]["taskId"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(order, named, "each task once, in the order named");
        assert_eq!(store.reads.load(Ordering::SeqCst), NAMED, "each read once");
    }

    /// A stream sends each named task's state once it is open (a change that fell between two
    /// streams is not missed), then each change once. A named task whose instance died is
    /// announced by nobody: the stream sends its failure once it counts as lost, whether it
    /// already did when the stream opened or comes to while the stream is open, and its own
    /// failing write's announcement does not send it twice.
    #[tokio::test(start_paused = true)]
    async fn a_stream_announces_a_named_task_whose_work_was_lost() {
        use crate::protocol::types::CallToolResult;
        use crate::server::{NoArguments, ToolDef};
        use crate::state::{Clock, LocalBus, SeededRandom};
        use crate::tasks::{MemoryTaskStore, TaskQuota, TaskRecord, TaskService, TaskStatus, TaskStore};
        /// Milliseconds on tokio's clock, which the test's runtime advances.
        struct TokioClock(tokio::time::Instant);
        impl Clock for TokioClock {
            fn now_ms(&self) -> u64 {
                1_000_000 + u64::try_from(self.0.elapsed().as_millis()).unwrap()
            }
        }
        let clock = Arc::new(TokioClock(tokio::time::Instant::now()));
        let now = clock.now_ms();
        let store = Arc::new(MemoryTaskStore::default());
        let alice = crate::security::Principal::verified(Some("alice"), None, vec![]);
        // Rounds of 1 s: a working task counts as lost 61 s after its round began.
        let lost_after_ms = 1_000 + 60_000;
        for (id, status, updated_at) in [
            ("gone__________________", "working", now - lost_after_ms - 1),
            ("soon__________________", "working", now - lost_after_ms + 5_000),
            ("fresh_________________", "working", now),
            ("done__________________", "completed", 0),
        ] {
            let record: TaskRecord = serde_json::from_value(json!({
                "version": 1, "taskId": id, "owner": alice.id(), "ownerVerified": true, "ownerScopes": [],
                "tool": "work", "arguments": {}, "status": status, "createdAt": 0, "updatedAt": updated_at,
                "ttlMs": 3_600_000, "roundLimitMs": 1_000
            }))
            .unwrap();
            store.create(&record, TaskQuota::default()).await.unwrap().unwrap();
        }
        let bus = Arc::new(LocalBus::default());
        let tasks = TaskService::new(store.clone(), clock, Arc::new(SeededRandom::new(1)), bus.clone());
        let mut server = McpServer::new("t", "1");
        server.enable_tasks(Arc::new(tasks));
        server.tool(ToolDef::new("work").description("Works"), |_, _: NoArguments| async { CallToolResult::text("") });
        let id = crate::protocol::RequestId::from_value(json!("L")).unwrap();
        let mut ctx = RequestContext::new(id, crate::protocol::Era::Modern, alice.clone(), bus);
        ctx.client_capabilities = json!({"extensions": {TASKS_EXTENSION: {}}}).as_object().unwrap().clone();
        let (outbox, mut events) = crate::body::outbox::channel(1024);
        ctx.outbox = Some(outbox);
        let params: RequestParams =
            serde_json::from_value(json!({"notifications": {"taskIds": ["gone__________________", "soon__________________", "fresh_________________", "done__________________"]}})).unwrap();
        let filter = server.listen_filter(&ctx, &params).unwrap();
        let limits = ListenLimits { max_duration: Duration::from_secs(30), keep_alive: Duration::from_secs(15) };
        let stopping = crate::state::Stopping::default();
        assert!(server.listen(&ctx, filter, limits, &stopping).await.is_some(), "the stream ends with its result");

        let status = |id: &'static str| {
            let store = store.clone();
            let owner = alice.id().to_owned();
            async move { store.get(&owner, id).await.unwrap().unwrap().status }
        };
        assert_eq!(status("gone__________________").await, TaskStatus::Failed, "lost when the stream opened");
        assert_eq!(status("soon__________________").await, TaskStatus::Failed, "lost while it was open");
        assert_eq!(status("fresh_________________").await, TaskStatus::Working, "not lost before the stream ended");
        let (sent, _) = std::future::poll_fn(|cx| events.poll_chunk(cx)).await.expect("the stream's events");
        let sent = String::from_utf8(sent).unwrap();
        let mut told: Vec<(String, String)> = sent
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap())
            .filter(|message| message["method"] == "notifications/tasks")
            .map(|message| {
                let task = &message["params"];
                (task["taskId"].as_str().unwrap().to_owned(), task["status"].as_str().unwrap().to_owned())
            })
            .collect();
        told.sort();
        // Each named task's state once the stream opened; then "soon__________________"'s failure; each once.
        let expected = [
            ("done__________________", "completed"),
            ("fresh_________________", "working"),
            ("gone__________________", "failed"),
            ("soon__________________", "failed"),
            ("soon__________________", "working"),
        ];
        assert_eq!(told, expected.map(|(id, status)| (id.to_owned(), status.to_owned())), "{sent}");
        assert!(sent.contains("work was lost"), "saying why: {sent}");
    }

    /// A subscription to a resource the caller may not read is not honoured (nor acknowledged);
    /// one to a resource it may read is.
    #[test]
    fn a_resource_the_caller_may_not_read_is_not_watched() {
        use crate::protocol::types::{Resource, ResourceContents};
        let mut server = McpServer::new("t", "1");
        let read = |_, uri: String| async move { Ok(vec![ResourceContents::text(uri, "text/plain", "x")]) };
        server.resource(Resource::new("a://open", "open"), read);
        server.resource(Resource::new("a://secret", "secret"), read).scopes(&["secret:read"]);
        server.scopes_enforced = true;
        let bus = Arc::new(crate::state::LocalBus::default());
        let params: RequestParams =
            serde_json::from_value(json!({"notifications": {"resourceSubscriptions": ["a://open", "a://secret"]}}))
                .unwrap();
        let watched = |scopes: Vec<String>| {
            let id = crate::protocol::RequestId::from_value(json!("L")).unwrap();
            let principal = crate::security::Principal::verified(Some("alice"), None, scopes);
            let ctx = RequestContext::new(id, crate::protocol::Era::Modern, principal, bus.clone());
            server.listen_filter(&ctx, &params).unwrap().to_json()["resourceSubscriptions"].clone()
        };
        assert_eq!(watched(vec![]), json!(["a://open"]));
        assert_eq!(watched(vec!["secret:read".into()]), json!(["a://open", "a://secret"]));
    }

    #[test]
    fn a_stream_ends_by_its_credentials_expiry_and_never_later_than_its_limit() {
        let limits = ListenLimits { max_duration: Duration::from_secs(280), keep_alive: Duration::from_secs(15) };
        assert_eq!(limits.within(None).max_duration, Duration::from_secs(280), "no credential: the limit");
        assert_eq!(limits.within(Some(Duration::from_secs(3))).max_duration, Duration::from_secs(3));
        assert_eq!(limits.within(Some(Duration::from_secs(3600))).max_duration, Duration::from_secs(280));
        assert_eq!(limits.within(Some(Duration::ZERO)).max_duration, Duration::ZERO);
        assert_eq!(limits.within(Some(Duration::from_secs(3))).keep_alive, Duration::from_secs(15));
    }

    #[test]
    fn a_full_listen_cap_is_a_429_naming_it() {
        let slots = Arc::new(Slots::default());
        let caps = ListenCaps { per_principal: 1, total: 2 };
        let _a = listen_slot(&slots, "a", caps).unwrap();
        let refused = listen_slot(&slots, "a", caps).unwrap_err();
        assert!(refused.message.contains("count alike) for this caller (limit 1)"), "{}", refused.message);
        let _b = listen_slot(&slots, "b", caps).unwrap();
        let full = listen_slot(&slots, "c", caps).unwrap_err();
        assert!(full.message.contains("on this server (limit 2)"), "{}", full.message);
        assert_eq!(
            (full.status, full.code),
            (http::StatusCode::TOO_MANY_REQUESTS, crate::protocol::ErrorCode::INVALID_REQUEST)
        );
    }
}
