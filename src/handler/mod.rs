//! The handler contract: what a tool, resource or prompt handler receives ([`RequestContext`])
//! and returns ([`Outcome`], [`InputRequired`], [`ToolError`]), the erased tool handler the
//! registry and the tasks extension both run, and the panic containment every handler runs
//! inside. It sits below `tasks` and `server`, which both depend on it.

mod context;
mod result;

pub use context::RequestContext;
pub use result::{IntoToolResult, Json};

use schemars::JsonSchema;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::protocol::McpError;
use crate::protocol::types::{CallToolResult, InputRequest};

/// A boxed, sendable future: the erased shape of every handler.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler of an MRTR-capable method returns: a final value, or a request for input.
#[derive(Debug)]
pub enum Outcome<T> {
    /// The final result.
    Complete(T),
    /// Ask the client for input, then expect a retry.
    InputRequired(InputRequired),
}

impl<T> From<T> for Outcome<T> {
    fn from(value: T) -> Self {
        Self::Complete(value)
    }
}

/// An `input_required` answer: the questions, and the state to get back on the retry.
///
/// The state is sealed by the library (HMAC, bound to principal, method and arguments, with an
/// expiry), so handlers put plain JSON here and read it back from
/// [`RequestContext::request_state`] already verified.
#[derive(Debug, Default)]
pub struct InputRequired {
    pub(crate) requests: Vec<(String, InputRequest)>,
    pub(crate) state: Option<Value>,
}

impl InputRequired {
    /// An empty answer; add requests and/or state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a request under `key` (keys are unique within the answer).
    pub fn request(mut self, key: impl Into<String>, request: InputRequest) -> Self {
        let key = key.into();
        self.requests.retain(|(k, _)| *k != key);
        self.requests.push((key, request));
        self
    }

    /// Attaches state to receive back on the retry.
    pub fn state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }
}

/// Why a tool call failed.
#[derive(Debug)]
pub enum ToolError {
    /// A tool execution error: reported as an `isError: true` result whose text is exactly
    /// this message.
    Execution(String),
    /// A protocol error: reported as a JSON-RPC error.
    Protocol(McpError),
}

impl From<McpError> for ToolError {
    fn from(e: McpError) -> Self {
        Self::Protocol(e)
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        Self::Execution(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        Self::Execution(message.to_owned())
    }
}

/// The result every tool handler's return value becomes ([`IntoToolResult`]).
pub type ToolResult = Result<Outcome<CallToolResult>, ToolError>;

/// Arguments for a tool that takes none: advertises `{"type":"object","additionalProperties":false}`.
#[derive(Clone, Copy, Debug, Default, serde::Deserialize)]
pub struct NoArguments {}

impl JsonSchema for NoArguments {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoArguments".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "additionalProperties": false })
    }
}

/// Runs a future, catching a panic inside it so one faulty handler cannot take down the
/// connection or task it runs on.
///
/// A plain function returning the wrapper, not an `async fn`: an `async fn` awaiting its future
/// argument stores that future twice (as the argument and as the awaited value), and the request
/// path nests several such wrappers.
pub(crate) fn catch_unwind<F: Future>(future: F) -> CatchUnwind<F> {
    CatchUnwind { inner: future }
}

/// Calls `start` under the guard [`catch_unwind`] polls with: a handler's call (reading its
/// arguments, and a closure's code before its first await) can panic before its future exists.
/// Apart from the future, so that the future awaited holds nothing but the handler's own.
pub(crate) fn catch_unwind_call<T>(start: impl FnOnce() -> T) -> std::thread::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::observe::in_handler(start)))
}

pin_project_lite::pin_project! {
    /// The future [`catch_unwind`] returns.
    pub(crate) struct CatchUnwind<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let inner = self.project().inner;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::observe::in_handler(|| inner.poll(cx)))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(value)) => std::task::Poll::Ready(Ok(value)),
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
}

/// An erased tool handler. It reads the validated arguments where they are (a typed handler
/// deserialises its parameters from them before its future starts), so a call copies nothing it
/// does not keep.
/// The arguments are a JSON object, passed as a `Value` so that a type deserialises from them
/// exactly as from `serde_json::from_value` (a newtype struct, say).
pub(crate) type ToolFn = Arc<dyn Fn(RequestContext, &Value) -> BoxFuture<ToolResult> + Send + Sync>;

/// Marks a tool run's `execute_tool` span with how `outcome` ended, and returns that as the
/// `mcp.outcome` word of its duration metric.
pub(crate) fn mark_tool_span(
    span: &crate::telemetry::SpanHandle,
    outcome: &Result<Outcome<CallToolResult>, ToolError>,
) -> &'static str {
    match outcome {
        Ok(Outcome::Complete(result)) if result.is_error => {
            span.fail("tool_error");
            "tool_error"
        }
        Ok(Outcome::InputRequired(_)) => {
            span.set([opentelemetry::KeyValue::new("mcp.result_type", "input_required")]);
            "input_required"
        }
        Ok(Outcome::Complete(_)) => "ok",
        Err(ToolError::Execution(_)) => {
            span.fail("tool_error");
            "tool_error"
        }
        Err(ToolError::Protocol(_)) => {
            span.fail("protocol_error");
            "protocol_error"
        }
    }
}
