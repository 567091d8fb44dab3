//! Everything a handler may know about the request it serves, passed explicitly.
//!
//! There is no ambient "current request": the principal, the declared client capabilities,
//! the MRTR answers and the notification outlet all arrive in this value, so two concurrent
//! requests on one instance can never see each other's data.
//!
//! A client that goes away cancels its handler by the handler's future being dropped (hyper drops
//! the service future of a JSON call, or the body of an SSE stream, which owns it): code after the
//! pending `.await` never runs, so what a handler must release goes in a `Drop` guard.

use crate::body::StreamEvent;
use crate::protocol::{Era, LogLevel, RequestId, jsonrpc};
use crate::security::Principal;
use crate::state::{ChangeBus, ChangeEvent};
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};

/// Where a request's notifications go; absent when the response is plain JSON.
pub(crate) use crate::body::Outbox;

/// The request being served, as handlers see it.
pub struct RequestContext {
    pub(crate) id: RequestId,
    pub(crate) era: Era,
    pub(crate) principal: Principal,
    pub(crate) client_capabilities: Map<String, Value>,
    pub(crate) progress_token: Option<Value>,
    pub(crate) log_level: Option<LogLevel>,
    pub(crate) input_responses: Map<String, Value>,
    pub(crate) request_state: Option<Value>,
    pub(crate) outbox: Option<Outbox>,
    pub(crate) bus: Arc<dyn ChangeBus>,
    /// Shared by the rounds of one request ([`RequestContext::fork`]): they write one stream,
    /// on which progress must grow across rounds too.
    pub(crate) last_progress: Arc<Mutex<Option<f64>>>,
    pub(crate) platform_token: Option<String>,
    pub(crate) span: crate::telemetry::SpanHandle,
}

impl RequestContext {
    /// A context for a request with no envelope extras: used by tests and by the legacy path.
    pub fn new(id: RequestId, era: Era, principal: Principal, bus: Arc<dyn ChangeBus>) -> Self {
        Self {
            id,
            era,
            principal,
            client_capabilities: Map::new(),
            progress_token: None,
            log_level: None,
            input_responses: Map::new(),
            request_state: None,
            outbox: None,
            bus,
            last_progress: Arc::default(),
            platform_token: None,
            span: crate::telemetry::SpanHandle::default(),
        }
    }

    /// A copy for another execution round of the same request (legacy MRTR fulfilment).
    pub(crate) fn fork(&self) -> Self {
        Self {
            id: self.id.clone(),
            era: self.era,
            principal: self.principal.clone(),
            client_capabilities: self.client_capabilities.clone(),
            progress_token: self.progress_token.clone(),
            log_level: self.log_level,
            input_responses: Map::new(),
            request_state: None,
            outbox: self.outbox.clone(),
            bus: self.bus.clone(),
            last_progress: self.last_progress.clone(),
            platform_token: self.platform_token.clone(),
            span: self.span.clone(),
        }
    }

    /// The request's span (a no-op when tracing is off): start child spans from it, or hand its
    /// `traceparent` to work that continues elsewhere.
    pub fn span(&self) -> &crate::telemetry::SpanHandle {
        &self.span
    }

    /// The platform's per-request OIDC token (`x-vercel-oidc-token`), for calling platform APIs
    /// such as Vercel Queues. It identifies the deployment, not the user; never forward it.
    pub fn platform_token(&self) -> Option<&str> {
        self.platform_token.as_deref()
    }

    /// The JSON-RPC id of the request.
    pub fn request_id(&self) -> &RequestId {
        &self.id
    }

    /// The protocol generation the request arrived in.
    pub fn era(&self) -> Era {
        self.era
    }

    /// The verified caller (or the anonymous principal).
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The `ClientCapabilities` this request declared.
    pub fn client_capabilities(&self) -> &Map<String, Value> {
        &self.client_capabilities
    }

    /// Whether the request declared a top-level capability (`"elicitation"`, `"sampling"`, ...).
    pub fn has_capability(&self, name: &str) -> bool {
        self.client_capabilities.get(name).is_some_and(Value::is_object)
    }

    /// Whether the request declared an extension such as `io.modelcontextprotocol/tasks`.
    pub fn has_extension(&self, id: &str) -> bool {
        self.client_capabilities.get("extensions").and_then(|e| e.get(id)).is_some_and(Value::is_object)
    }

    /// The client's answer to the input request named `key`, if the request carries one.
    ///
    /// An answer is not proof that the question was asked: a first call may carry
    /// `inputResponses` too, and they reach the handler as they came. A handler whose answer
    /// grants something (a confirmation, an approval) asks with a sealed state that names the
    /// question (`{"asked": key}`) and takes the answer only when [`RequestContext::request_state`]
    /// names it; the catalogue's `solicited_answer` does exactly that.
    pub fn input_response(&self, key: &str) -> Option<&Value> {
        self.input_responses.get(key)
    }

    /// All answers the request carries (see [`RequestContext::input_response`]).
    pub fn input_responses(&self) -> &Map<String, Value> {
        &self.input_responses
    }

    /// The handler's own state from the previous round, already verified and opened.
    pub fn request_state(&self) -> Option<&Value> {
        self.request_state.as_ref()
    }

    /// The request's `progressToken`, if it asked for progress.
    pub fn progress_token(&self) -> Option<&Value> {
        self.progress_token.as_ref()
    }

    /// Whether a client would receive progress notifications for this request.
    pub fn wants_progress(&self) -> bool {
        self.progress_token.is_some() && self.outbox.is_some()
    }

    /// Sends `notifications/progress` if the request asked for it. Values that do not increase
    /// are dropped, since the spec requires progress to grow; so are NaN and infinities, which
    /// JSON cannot carry (and after a NaN, no value would compare as smaller).
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let (Some(token), Some(outbox)) = (&self.progress_token, &self.outbox) else { return };
        if !progress.is_finite() || total.is_some_and(|total| !total.is_finite()) {
            return;
        }
        {
            let mut last = self.last_progress.lock().expect("progress lock");
            if last.is_some_and(|l| progress <= l) {
                return;
            }
            *last = Some(progress);
        }
        // Written straight into the stream; a stream whose client has gone drops it.
        let _ =
            outbox.send_with(|out| jsonrpc::write_progress_notification(out, token, progress, total, message)).await;
    }

    /// Sends `notifications/message` if the request set a log level at or below `level`
    /// (legacy requests, which cannot set one, receive everything).
    pub async fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        let Some(outbox) = &self.outbox else { return };
        let permitted = match (self.era, self.log_level) {
            (_, Some(min)) => level >= min,
            (Era::Legacy, None) => true,
            (Era::Modern, None) => false,
        };
        if !permitted {
            return;
        }
        let mut params = json!({ "level": level.as_str(), "data": data });
        if let Some(logger) = logger {
            params["logger"] = json!(logger);
        }
        let _ = outbox.send(StreamEvent::Notification(jsonrpc::notification("notifications/message", &params))).await;
    }

    /// Announces a change to every `subscriptions/listen` stream that asked for it.
    pub fn publish_change(&self, event: ChangeEvent) {
        self.bus.publish(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll};

    /// Progress grows across the rounds of one request (a 2025 call re-run after the client's
    /// answer writes the same stream), and NaN or an infinity is never sent.
    #[tokio::test]
    async fn progress_grows_across_rounds_and_stays_finite() {
        let id = RequestId::from_value(serde_json::json!(1)).unwrap();
        let mut first =
            RequestContext::new(id, Era::Legacy, Principal::anonymous(), Arc::new(crate::state::LocalBus::default()));
        let (outbox, mut events) = crate::body::outbox::channel(16);
        first.outbox = Some(outbox);
        first.progress_token = Some(serde_json::json!("p"));
        let next = first.fork();
        first.progress(f64::NAN, None, None).await;
        first.progress(1.0, Some(f64::INFINITY), None).await;
        first.progress(1.0, None, None).await;
        first.progress(2.0, None, None).await;
        next.progress(1.0, None, None).await;
        next.progress(2.0, None, None).await;
        next.progress(3.0, None, None).await;
        next.progress(f64::INFINITY, None, None).await;
        let waker = futures_util::task::noop_waker();
        let Poll::Ready(Some((chunk, _))) = events.poll_chunk(&mut Context::from_waker(&waker)) else { panic!("sent") };
        let sent: Vec<f64> = String::from_utf8(chunk)
            .unwrap()
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap()["params"]["progress"].as_f64().unwrap())
            .collect();
        assert_eq!(sent, [1.0, 2.0, 3.0]);
    }
}
