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
use crate::security::{Slot, SlotCaps, Slots, SlotsFull};
use crate::state::ChangeEvent;
use std::sync::Arc;

/// Timing of a listen stream.
#[derive(Clone, Copy, Debug)]
pub struct ListenLimits {
    /// When to close gracefully.
    pub max_duration: Duration,
    /// How often to send a keep-alive comment.
    pub keep_alive: Duration,
}

/// How long a stream waits to read again a task it could not read (the store failed).
const UNREAD_RETRY: Duration = Duration::from_secs(1);

/// How many listen streams may be open at once in one instance: per caller (the anonymous
/// caller is one caller), and in all.
pub type ListenCaps = SlotCaps;

/// The default caps on listen streams.
pub const DEFAULT_LISTEN_CAPS: ListenCaps = SlotCaps { per_principal: 16, total: 512 };

/// Takes a listen slot for `principal`, held for as long as its stream's work lives (the
/// response body owns it, so it is given back however the stream ends), or the 429 that says
/// which cap is reached.
pub(crate) fn listen_slot(slots: &Arc<Slots>, principal: &str, caps: ListenCaps) -> Result<Slot, McpError> {
    slots.acquire(principal, caps).map_err(|full| {
        let message = match full {
            SlotsFull::Total => format!(
                "Too many open subscriptions/listen streams on this server (limit {}); try again later",
                caps.total
            ),
            SlotsFull::Principal => format!(
                "Too many open subscriptions/listen streams for this caller (limit {}); close one first",
                caps.per_principal
            ),
        };
        McpError::new(crate::protocol::ErrorCode::INVALID_REQUEST, http::StatusCode::TOO_MANY_REQUESTS, message)
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

    /// One change of every kind this filter wants, to catch up a stream that may have missed
    /// some. Each task named is read as `owner`'s: another caller's task is not found, so it
    /// sends nothing.
    fn everything(&self, owner: &str) -> Vec<ChangeEvent> {
        let lists = [
            (self.tools, ChangeEvent::ToolsListChanged),
            (self.prompts, ChangeEvent::PromptsListChanged),
            (self.resources, ChangeEvent::ResourcesListChanged),
        ];
        let lists = lists.into_iter().filter_map(|(wanted, event)| wanted.then_some(event));
        let resources = self.resource_uris.iter().cloned().map(ChangeEvent::ResourceUpdated);
        let tasks = self
            .task_ids
            .iter()
            .map(|task_id| ChangeEvent::TaskChanged { owner: owner.to_owned(), task_id: task_id.clone() });
        lists.chain(resources).chain(tasks).collect()
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
        let resources = !self.resources.is_empty() || !self.templates.is_empty();
        Ok(Filter {
            tools: flag("toolsListChanged")? && !self.tools.is_empty(),
            prompts: flag("promptsListChanged")? && !self.prompts.is_empty(),
            resources: flag("resourcesListChanged")? && resources,
            resource_uris: if resources { uris } else { Vec::new() },
            task_ids: if self.tasks.is_some() { task_ids } else { Vec::new() },
        })
    }

    /// Runs the stream: acknowledgement, matching notifications and keep-alives, then the
    /// graceful result once `limits.max_duration` has passed. Returns early (with no result to
    /// send) when the client closes the stream.
    pub(crate) async fn listen(
        &self,
        ctx: &RequestContext,
        filter: Filter,
        limits: ListenLimits,
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
        let deadline = tokio::time::sleep(limits.max_duration);
        tokio::pin!(deadline);
        // Armed when a task could not be read for the stream (the store failed): it catches up
        // again a second later, so a task's final state is not lost to a store blip. Also armed,
        // a moment ahead, to catch up after the bus reconnects.
        let unread = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(unread);
        let mut unread_armed = false;
        let mut keep_alive =
            tokio::time::interval_at(tokio::time::Instant::now() + limits.keep_alive, limits.keep_alive);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = outbox.closed() => return None,
                _ = keep_alive.tick() => outbox.send(StreamEvent::KeepAlive).await.ok()?,
                change = changes.recv() => match change {
                    Ok(event) if filter.wants(&event) => {
                        let all_read = self.deliver(ctx, &event, &tag, outbox).await.ok()?;
                        unread_armed |= retry_unread(unread.as_mut(), all_read);
                    }
                    Ok(_) => {}
                    // The bus moved on before this stream read some changes (the client reads
                    // slowly, or many changes came at once), and which ones is unknown.
                    Err(RecvError::Lagged(_)) => {
                        let all_read = self.catch_up(ctx, &filter, &tag, outbox).await.ok()?;
                        unread_armed |= retry_unread(unread.as_mut(), all_read);
                    }
                    Err(RecvError::Closed) => break,
                },
                () = &mut unread, if unread_armed => {
                    let all_read = self.catch_up(ctx, &filter, &tag, outbox).await.ok()?;
                    unread_armed = retry_unread(unread.as_mut(), all_read);
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
    ) -> Result<bool, crate::body::outbox::Closed> {
        let mut all_read = true;
        for event in filter.everything(ctx.principal.id()) {
            all_read &= self.deliver(ctx, &event, tag, outbox).await?;
        }
        Ok(all_read)
    }

    /// Sends what a wanted change becomes on `ctx`'s stream, if anything: a task's full state
    /// for its owner's streams only (read now, so it is the latest), a list or resource change as
    /// it is. False when the task could not be read (the store failed).
    async fn deliver(
        &self,
        ctx: &RequestContext,
        event: &ChangeEvent,
        tag: &Value,
        outbox: &crate::body::Outbox,
    ) -> Result<bool, crate::body::outbox::Closed> {
        let message = match event {
            ChangeEvent::TaskChanged { owner, task_id } => {
                let Some(tasks) = self.tasks.as_ref().filter(|_| owner == ctx.principal.id()) else { return Ok(true) };
                match tasks.notification(&ctx.principal, task_id).await {
                    Ok(Some(mut params)) => {
                        params.insert("_meta".into(), tag.clone());
                        jsonrpc::notification("notifications/tasks", &params)
                    }
                    Ok(None) => return Ok(true),
                    Err(_) => return Ok(false),
                }
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
    use std::sync::Arc;

    #[test]
    fn a_full_listen_cap_is_a_429_naming_it() {
        let slots = Arc::new(Slots::default());
        let caps = ListenCaps { per_principal: 1, total: 2 };
        let _a = listen_slot(&slots, "a", caps).unwrap();
        let refused = listen_slot(&slots, "a", caps).unwrap_err();
        assert!(refused.message.contains("for this caller (limit 1)"), "{}", refused.message);
        let _b = listen_slot(&slots, "b", caps).unwrap();
        let full = listen_slot(&slots, "c", caps).unwrap_err();
        assert!(full.message.contains("on this server (limit 2)"), "{}", full.message);
        assert_eq!(
            (full.status, full.code),
            (http::StatusCode::TOO_MANY_REQUESTS, crate::protocol::ErrorCode::INVALID_REQUEST)
        );
    }
}
