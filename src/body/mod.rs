//! The response body of every route: a buffered payload, or an SSE stream fed through an
//! outbox (`outbox.rs`).
//!
//! A stream's body owns the work producing it and polls that work itself, then writes everything
//! the work has sent by then as one chunk. No task is woken per event, and a burst of
//! notifications followed by the result is one write, which matters where the connection does
//! not set `TCP_NODELAY` (`vercel_runtime`'s): there each later small write waited for the
//! client's delayed ACK. When the client goes away hyper drops the body, and the work with it,
//! which is how closing an SSE stream cancels the handler.
//!
//! It sits low (it needs only the protocol's bytes) so that every part that answers HTTP, the
//! security checks and the queue consumer included, can build a response without the transport.

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use sync_wrapper::SyncWrapper;

use serde_json::Value;

pub(crate) mod outbox;
pub(crate) use outbox::{Events, First, Outbox, STREAM_CAPACITY};

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
    /// A 401 or 403 challenge (`WWW-Authenticate`) to a credential that was sent: invalid,
    /// expired, malformed, or without the scope.
    AuthFailure,
    /// A 401 challenge to a request that sent no credential: how a client learns it must get one,
    /// routine on a first request, so not counted with the failures.
    AuthRequired,
    /// A 401 `invalid_token` to a token that was good until it expired: its holder refreshes it,
    /// routine for every client, so not counted with the failures either.
    TokenExpired,
    /// A tool call refused before its handler ran: its arguments broke the tool's input schema.
    /// Answered as a tool error; logged apart from one, since a run of them is a client (or a
    /// prober) sending what the tool does not take.
    InvalidArguments,
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
            Self::AuthRequired => "auth_required",
            Self::TokenExpired => "token_expired",
            Self::InvalidArguments => "invalid_arguments",
        }
    }

    /// The level of the request's log line with `status`: `error` for a 5xx; `warn` for a refusal
    /// of what the caller sent (a credential, arguments), since a run of them is worth an alert
    /// (a client misconfigured, or someone probing); `info` for the rest, the routine 401s that
    /// ask for a credential or a fresh one included.
    pub fn level(self, status: u16) -> &'static str {
        match self {
            _ if status >= 500 => "error",
            Self::AuthFailure | Self::InvalidArguments => "warn",
            _ => "info",
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

/// The work feeding a stream: it sends its events through the stream's [`Outbox`] and ends after
/// sending the final response. The body polls it (see the module's comment).
pub(crate) type Producer = Pin<Box<dyn Future<Output = ()> + Send>>;

enum Kind {
    Full(Option<Bytes>),
    Stream {
        events: Events,
        done: bool,
        // `None` once it has finished. `SyncWrapper` because a body must be `Sync`
        // (`vercel_runtime` boxes it as a `BoxBody`) and a future need not be; it is only ever
        // reached through `&mut`.
        producer: Option<SyncWrapper<Producer>>,
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

    /// An SSE stream of whatever `events` carries, up to and including the final response, while
    /// the body polls `producer` (unless it has finished).
    pub(crate) fn sse(events: Events, producer: Option<Producer>) -> Self {
        Self::of(Kind::Stream { events, done: false, producer: producer.map(SyncWrapper::new) })
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

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream { events, done, producer } => {
                if *done {
                    return Poll::Ready(None);
                }
                // The work runs first, so what it sends now goes out in this chunk (and need not
                // wake this task to be read).
                if let Some(work) = producer {
                    events.quiet();
                    if work.get_mut().as_mut().poll(cx).is_ready() {
                        *producer = None;
                    }
                }
                // Everything sent so far, up to the final response. The stream's capacity bounds
                // a chunk: a producer that fills it waits for this read, which wakes it.
                match events.poll_chunk(cx) {
                    Poll::Ready(Some((chunk, ended))) => {
                        *done = ended;
                        Poll::Ready(Some(Ok(Frame::data(chunk.into()))))
                    }
                    // The work ended without a final response (it cannot, short of a bug): end
                    // the stream after what was read.
                    Poll::Ready(None) => {
                        *done = true;
                        Poll::Ready(None)
                    }
                    Poll::Pending => Poll::Pending,
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Wake, Waker};
    use tokio::sync::oneshot;

    /// A waker that records that it was woken.
    struct Woken(AtomicBool);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    impl Woken {
        fn new() -> (Arc<Self>, Waker) {
            let woken = Arc::new(Self(AtomicBool::new(false)));
            (woken.clone(), Waker::from(woken))
        }

        fn take(&self) -> bool {
            self.0.swap(false, Ordering::SeqCst)
        }
    }

    /// Sends `event` into a stream with room (no waiting).
    fn sent(tx: &Outbox, event: StreamEvent) {
        use futures_util::FutureExt;
        tx.send(event).now_or_never().expect("the stream has room").expect("the stream is open");
    }

    fn notification(n: u32) -> StreamEvent {
        StreamEvent::Notification(format!("{{\"n\":{n}}}").into_bytes())
    }

    fn last() -> StreamEvent {
        StreamEvent::Response(FinalResponse {
            status: http::StatusCode::OK,
            body: b"{\"id\":1}".to_vec(),
            outcome: ResponseOutcome::Ok,
        })
    }

    /// Work that sends notification `n` for each of `numbers`, then the final response.
    fn notifications_then_last(tx: Outbox, numbers: std::ops::RangeInclusive<u32>) -> Producer {
        Box::pin(async move {
            for n in numbers {
                tx.send(notification(n)).await.unwrap();
            }
            tx.send(last()).await.unwrap();
        })
    }

    fn frames(numbers: impl IntoIterator<Item = u32>) -> String {
        numbers.into_iter().map(|n| format!("event: message\ndata: {{\"n\":{n}}}\n\n")).collect()
    }

    const LAST: &str = "event: message\ndata: {\"id\":1}\n\n";

    /// One `poll_frame`, its chunk as text.
    fn poll(body: &mut Body, waker: &Waker) -> Poll<Option<String>> {
        let mut cx = Context::from_waker(waker);
        Pin::new(body)
            .poll_frame(&mut cx)
            .map(|frame| frame.map(|f| String::from_utf8(f.unwrap().into_data().unwrap().to_vec()).unwrap()))
    }

    #[test]
    fn what_the_work_sends_in_one_poll_goes_out_as_one_chunk() {
        let (tx, rx) = outbox::channel(64);
        sent(&tx, notification(1));
        let work = notifications_then_last(tx, 2..=3);
        let mut body = Body::sse(rx, Some(work));
        let (_, waker) = Woken::new();
        assert_eq!(poll(&mut body, &waker), Poll::Ready(Some(frames(1..=3) + LAST)));
        assert!(body.is_end_stream(), "the final response ends the stream");
        assert_eq!(poll(&mut body, &waker), Poll::Ready(None));
    }

    #[test]
    fn an_event_goes_out_before_the_work_waits_and_the_work_wakes_the_body() {
        let (tx, rx) = outbox::channel(64);
        sent(&tx, notification(1));
        let (go, wait) = oneshot::channel::<()>();
        let work: Producer = Box::pin(async move {
            tx.send(notification(2)).await.unwrap();
            wait.await.unwrap();
            tx.send(last()).await.unwrap();
        });
        let mut body = Body::sse(rx, Some(work));
        let (woken, waker) = Woken::new();
        assert_eq!(poll(&mut body, &waker), Poll::Ready(Some(frames(1..=2))), "not held back for the rest");
        assert_eq!(poll(&mut body, &waker), Poll::Pending);
        assert!(!woken.take());
        go.send(()).unwrap();
        assert!(woken.take(), "what the work waits on wakes the body's task");
        assert_eq!(poll(&mut body, &waker), Poll::Ready(Some(LAST.to_owned())));
        assert_eq!(poll(&mut body, &waker), Poll::Ready(None));
    }

    #[test]
    fn work_that_fills_the_stream_goes_on_after_each_read_and_nothing_is_lost_or_reordered() {
        let (tx, rx) = outbox::channel(4);
        sent(&tx, notification(1));
        let work = notifications_then_last(tx, 2..=40);
        let mut body = Body::sse(rx, Some(work));
        let (_, waker) = Woken::new();
        let (mut streamed, mut chunks) = (String::new(), 0);
        for _ in 0..100 {
            match poll(&mut body, &waker) {
                Poll::Ready(Some(chunk)) => {
                    assert!(
                        chunk.matches("event:").count() <= 5,
                        "a chunk is bounded by the stream's capacity: {chunk}"
                    );
                    streamed += &chunk;
                    chunks += 1;
                }
                Poll::Ready(None) => break,
                // Each read made room, and the next poll runs the work first: it always has
                // something to send until it ends.
                Poll::Pending => panic!("the work stalled on a stream the body had emptied"),
            }
        }
        assert_eq!(streamed, frames(1..=40) + LAST);
        assert!(chunks >= 8, "{chunks} chunks for 41 events through a stream of 4");
    }

    #[test]
    fn dropping_the_body_drops_its_work() {
        let (tx, rx) = outbox::channel(4);
        sent(&tx, notification(1));
        let (alive, mut dropped) = oneshot::channel::<()>();
        let work: Producer = Box::pin(async move {
            let _alive = alive;
            tx.send(notification(2)).await.unwrap();
            std::future::pending::<()>().await;
        });
        let mut body = Body::sse(rx, Some(work));
        let (_, waker) = Woken::new();
        assert_eq!(poll(&mut body, &waker), Poll::Ready(Some(frames(1..=2))));
        assert_eq!(dropped.try_recv(), Err(oneshot::error::TryRecvError::Empty), "the work is still running");
        drop(body);
        assert_eq!(dropped.try_recv(), Err(oneshot::error::TryRecvError::Closed), "and is gone with the body");
    }

    #[test]
    fn work_that_ends_without_a_final_response_ends_the_stream_after_what_it_sent() {
        let (tx, rx) = outbox::channel(4);
        sent(&tx, notification(1));
        let work: Producer = Box::pin(async move {
            tx.send(notification(2)).await.unwrap();
        });
        let mut body = Body::sse(rx, Some(work));
        let (_, waker) = Woken::new();
        assert_eq!(poll(&mut body, &waker), Poll::Ready(Some(frames(1..=2))));
        assert_eq!(poll(&mut body, &waker), Poll::Ready(None));
    }
}
