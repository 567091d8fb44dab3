//! The response body of every route: a buffered payload, or an SSE stream fed by a channel.
//!
//! When the client goes away hyper drops the body; the stream variant then aborts the task
//! producing it, which is how closing an SSE stream cancels the handler.
//!
//! It sits low (it needs only the protocol's bytes) so that every part that answers HTTP, the
//! security checks and the queue consumer included, can build a response without the transport.

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use serde_json::Value;

/// A message the transport writes to the request's SSE stream.
#[derive(Debug)]
pub enum StreamEvent {
    /// A JSON-RPC notification related to the request, serialised when it was made
    /// (`protocol::jsonrpc::notification`): a handler may send many, and none needs a `Value`.
    Notification(Vec<u8>),
    /// A server-to-client request (legacy path only).
    ClientRequest {
        /// The full JSON-RPC request.
        message: Value,
    },
    /// The final JSON-RPC response; it ends the stream.
    Response(FinalResponse),
    /// A keep-alive comment.
    KeepAlive,
}

/// The final JSON-RPC response of a request, with what it says.
#[derive(Debug)]
pub struct FinalResponse {
    /// The HTTP status, used when nothing was streamed before it.
    pub status: http::StatusCode,
    /// The serialised response.
    pub body: Vec<u8>,
    /// What it says, for the request log.
    pub outcome: ResponseOutcome,
}

/// What a response says, for the request log. It is set where the response is built (and
/// travels with its [`Body`]), so the log never reads the bytes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResponseOutcome {
    /// A result (a listing, a complete or input-required result, a successful tool call), or a
    /// transport answer such as 202 or 204.
    #[default]
    Ok,
    /// A tool call whose result has `isError: true`.
    ToolError,
    /// A JSON-RPC error (with its code) or an HTTP refusal with no JSON-RPC body (no code).
    ProtocolError(Option<i32>),
    /// A 401 or 403 challenge (`WWW-Authenticate`).
    AuthFailure,
}

impl ResponseOutcome {
    /// The outcome for a tool result, from its `isError` flag.
    pub fn of_tool_result(is_error: bool) -> Self {
        if is_error { Self::ToolError } else { Self::Ok }
    }

    /// The log's name for it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::ProtocolError(_) => "protocol_error",
            Self::AuthFailure => "auth_failure",
        }
    }

    /// The JSON-RPC error code, for a protocol error that has one.
    pub fn code(self) -> Option<i32> {
        match self {
            Self::ProtocolError(code) => code,
            _ => None,
        }
    }
}

/// A response body, and what the response says when its builder knew ([`Body::with_outcome`]).
pub struct Body {
    kind: Kind,
    outcome: Option<ResponseOutcome>,
}

enum Kind {
    Full(Option<Bytes>),
    Stream {
        events: mpsc::Receiver<StreamEvent>,
        first: Option<StreamEvent>,
        done: bool,
        producer: Option<AbortHandle>,
    },
}

impl Body {
    /// A complete, buffered body.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Self::of(Kind::Full((!bytes.is_empty()).then_some(bytes)))
    }

    /// No body.
    pub fn empty() -> Self {
        Self::of(Kind::Full(None))
    }

    /// An SSE stream: `first` (already received) and then whatever `events` yields, up to and
    /// including the final response. Dropping the body aborts `producer`.
    pub(crate) fn sse(first: StreamEvent, events: mpsc::Receiver<StreamEvent>, producer: Option<AbortHandle>) -> Self {
        Self::of(Kind::Stream { events, first: Some(first), done: false, producer })
    }

    fn of(kind: Kind) -> Self {
        Self { kind, outcome: None }
    }

    /// Tags the body with what its response says (a field, not an `http` extension: those cost
    /// two allocations on every response).
    pub(crate) fn with_outcome(mut self, outcome: ResponseOutcome) -> Self {
        self.outcome = Some(outcome);
        self
    }

    /// What the response says, if its builder said.
    pub fn outcome(&self) -> Option<ResponseOutcome> {
        self.outcome
    }

    /// Whether this is an SSE stream.
    pub fn is_stream(&self) -> bool {
        matches!(self.kind, Kind::Stream { .. })
    }

    /// Collects the body (tests and the in-process queue use this).
    pub async fn collect(self) -> Bytes {
        use http_body_util::BodyExt;
        BodyExt::collect(self).await.map(|c| c.to_bytes()).unwrap_or_default()
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Kind::Stream { producer: Some(producer), .. } = &self.kind {
            producer.abort();
        }
    }
}

/// Frames one event as SSE. Data is compact JSON, so it never contains a raw newline.
pub(crate) fn frame(event: &StreamEvent) -> Bytes {
    match event {
        StreamEvent::KeepAlive => Bytes::from_static(b": keep-alive\n\n"),
        StreamEvent::Notification(json) => frame_json(json),
        StreamEvent::ClientRequest { message } => frame_json(&serde_json::to_vec(message).expect("values serialise")),
        StreamEvent::Response(last) => frame_json(&last.body),
    }
}

fn frame_json(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    out.into()
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream { events, first, done, .. } => {
                if *done {
                    return Poll::Ready(None);
                }
                let event = match first.take() {
                    Some(event) => event,
                    None => match events.poll_recv(cx) {
                        Poll::Ready(Some(event)) => event,
                        Poll::Ready(None) => {
                            *done = true;
                            return Poll::Ready(None);
                        }
                        Poll::Pending => return Poll::Pending,
                    },
                };
                if matches!(event, StreamEvent::Response(_)) {
                    // The final response ends the stream.
                    *done = true;
                }
                Poll::Ready(Some(Ok(Frame::data(frame(&event)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Stream { done, .. } => *done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Stream { .. } => SizeHint::default(),
        }
    }
}
