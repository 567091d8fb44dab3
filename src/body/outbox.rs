//! A request's stream outlet: what its work sends, written as SSE frames into one buffer that the
//! response body takes whole.
//!
//! A channel of events cost an allocation per notification (its bytes, freed again once copied
//! into the chunk), a channel per request, and a permit per send. Here a notification is framed
//! where it is made, straight into the buffer the next chunk is: one lock, no allocation once the
//! buffer has room. The contract is a bounded channel's:
//!
//! - **order**: frames go out in the order they were sent, the final response last;
//! - **back-pressure**: at most [`STREAM_CAPACITY`] events wait unread, and senders also wait once
//!   [`STREAM_MAX_UNREAD_BYTES`] are unread (the frame that crosses that bound is taken whole, so
//!   what waits is under the bound plus one frame); a sender past that waits until the body takes
//!   them (the final response never waits: it has a slot of its own);
//! - **closing**: once the body is dropped (the client went away) every send fails with
//!   [`Closed`], waiting senders included, and [`Outbox::closed`] resolves; once every sender is
//!   gone without a final response, the body ends after what was sent.
//!
//! The final response is kept apart, unframed, until the body reads: a request whose work sends
//! nothing before it is answered as plain JSON ([`Events::poll_first`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use tokio::sync::Notify;

use super::{FinalResponse, StreamEvent};

/// Events a stream holds unread before its senders wait.
pub const STREAM_CAPACITY: usize = 64;

/// Bytes of framed events a stream holds unread before its senders wait: events are not all
/// small (a task's notification carries its record, up to 256 KiB), and sixty-four of the
/// largest would hold 16 MiB per stream. A frame is taken whole while less than this is unread,
/// so a stream holds at most this plus one frame.
pub const STREAM_MAX_UNREAD_BYTES: usize = 1 << 20;

/// The first allocation of a chunk that has something to carry: a burst (ten notifications and
/// a result are ≈ 2 KB) fits without the buffer growing and copying itself.
const CHUNK_START: usize = 4096;

/// What an SSE frame puts before and after its JSON. The JSON is compact, so it never holds a
/// raw newline.
const DATA_PREFIX: &[u8] = b"event: message\ndata: ";
const DATA_SUFFIX: &[u8] = b"\n\n";

/// Appends one SSE `message` event whose data is the JSON `write` appends.
fn frame_json(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(DATA_PREFIX);
    write(out);
    out.extend_from_slice(DATA_SUFFIX);
}

/// The stream is gone: its body was dropped, or its final response was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

/// The sending side: the request's work (and its handler's [`crate::handler::RequestContext`])
/// sends through it. Clones send into the same stream.
pub struct Outbox {
    shared: Arc<Shared>,
}

/// The reading side, owned by the response (or, until the response is chosen, by the transport).
pub struct Events {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when waiting senders may go on: the body took the buffer, or was dropped.
    room: Notify,
}

struct State {
    /// Framed events not yet taken.
    chunk: Vec<u8>,
    /// How much of `chunk` is whole frames (all of it, unless a frame writer panicked).
    whole: usize,
    /// How many events `chunk` holds.
    queued: usize,
    capacity: usize,
    /// The final response, until the body frames it.
    last: Option<FinalResponse>,
    /// The final response was sent: nothing more is accepted.
    ended: bool,
    /// The reading side was dropped.
    closed: bool,
    /// Live [`Outbox`]es.
    senders: usize,
    /// The reader waiting for something to take.
    reader: Option<Waker>,
}

/// A stream holding at most `capacity` unread events.
pub fn channel(capacity: usize) -> (Outbox, Events) {
    let state = State {
        chunk: Vec::new(),
        whole: 0,
        queued: 0,
        capacity: capacity.max(1),
        last: None,
        ended: false,
        closed: false,
        senders: 1,
        reader: None,
    };
    let shared = Arc::new(Shared { state: Mutex::new(state), room: Notify::new() });
    (Outbox { shared: shared.clone() }, Events { shared })
}

impl State {
    /// Whether a sender must wait for the body to read: as many events, or as many bytes, as the
    /// stream holds unread.
    fn full(&self) -> bool {
        self.queued >= self.capacity || self.chunk.len() >= STREAM_MAX_UNREAD_BYTES
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| {
            // Only a sender's frame writer runs anything that can panic under the lock: what it
            // left half-written is cut off, so the stream still carries whole frames only (the
            // panic itself reaches the request's work, which answers with an error).
            self.state.clear_poison();
            let mut state = poisoned.into_inner();
            let whole = state.whole;
            state.chunk.truncate(whole);
            state
        })
    }
}

/// How the work's first output reads (see [`Events::poll_first`]).
pub enum First {
    /// The final response, with nothing before it: answer with plain JSON.
    Response(FinalResponse),
    /// Something was streamed first: answer with an SSE stream of it all.
    Stream,
    /// Every sender is gone without a word.
    Gone,
}

impl Outbox {
    /// Sends `event`, waiting while the stream is full. The final response
    /// ([`StreamEvent::Response`]) ends the stream and never waits.
    pub async fn send(&self, event: StreamEvent) -> Result<(), Closed> {
        match event {
            StreamEvent::Response(last) => self.send_final(last),
            StreamEvent::Notification(json) => self.send_with(|out| out.extend_from_slice(&json)).await,
            StreamEvent::ClientRequest { message } => {
                self.send_with(|out| serde_json::to_writer(out, &message).expect("values serialise")).await
            }
            StreamEvent::KeepAlive => self.send_raw(|out| out.extend_from_slice(b": keep-alive\n\n")).await,
        }
    }

    /// Sends one JSON message that `write` appends (compact, as `serde_json` writes it) straight
    /// into the stream's buffer, waiting while the stream is full. `write` runs under the
    /// stream's lock: it must only write (touching this stream from it would deadlock).
    pub async fn send_with(&self, write: impl FnOnce(&mut Vec<u8>)) -> Result<(), Closed> {
        self.send_raw(|out| frame_json(out, write)).await
    }

    /// Sends what `frame` appends as one event.
    async fn send_raw(&self, frame: impl FnOnce(&mut Vec<u8>)) -> Result<(), Closed> {
        let mut frame = Some(frame);
        loop {
            // Most sends find room and never build the waiting machinery.
            if let Some(sent) = self.try_write(&mut frame) {
                return sent;
            }
            let room = self.shared.room.notified();
            tokio::pin!(room);
            // Registered before the check, so a read between the two is not missed.
            room.as_mut().enable();
            if let Some(sent) = self.try_write(&mut frame) {
                return sent;
            }
            room.await;
        }
    }

    /// Writes the frame if the stream has room (`None` if it is full), waking the reader.
    fn try_write(&self, frame: &mut Option<impl FnOnce(&mut Vec<u8>)>) -> Option<Result<(), Closed>> {
        let mut state = self.shared.lock();
        if state.closed || state.ended {
            return Some(Err(Closed));
        }
        if state.full() {
            return None;
        }
        if state.chunk.capacity() == 0 {
            state.chunk.reserve(CHUNK_START);
        }
        (frame.take().expect("a frame is written once"))(&mut state.chunk);
        state.whole = state.chunk.len();
        state.queued += 1;
        let reader = state.reader.take();
        drop(state);
        if let Some(reader) = reader {
            reader.wake();
        }
        Some(Ok(()))
    }

    /// Sends the final response; the stream takes nothing after it. It never waits: the final
    /// response has a slot of its own.
    pub fn send_final(&self, last: FinalResponse) -> Result<(), Closed> {
        let mut state = self.shared.lock();
        if state.closed || state.ended {
            return Err(Closed);
        }
        state.last = Some(last);
        state.ended = true;
        // Only a full stream can have senders waiting for room; they will find it ended.
        let senders_wait = state.full();
        let reader = state.reader.take();
        drop(state);
        if senders_wait {
            self.shared.room.notify_waiters();
        }
        if let Some(reader) = reader {
            reader.wake();
        }
        Ok(())
    }

    /// Resolves once the reading side is gone (the client closed the stream).
    pub async fn closed(&self) {
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.is_closed() {
                return;
            }
            room.await;
        }
    }

    /// Whether the reading side is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }
}

impl Clone for Outbox {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Self { shared: self.shared.clone() }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.senders -= 1;
        let reader = if state.senders == 0 { state.reader.take() } else { None };
        drop(state);
        if let Some(reader) = reader {
            reader.wake();
        }
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Outbox")
    }
}

impl Events {
    /// Until the response is chosen: whether the work answered outright, streamed first, or
    /// left without a word. Pending (and woken by the next send) while it has done none of these.
    pub fn poll_first(&mut self, cx: &mut Context<'_>) -> Poll<First> {
        let mut state = self.shared.lock();
        if state.queued > 0 {
            return Poll::Ready(First::Stream);
        }
        if let Some(last) = state.last.take() {
            return Poll::Ready(First::Response(last));
        }
        if state.senders == 0 {
            return Poll::Ready(First::Gone);
        }
        register(&mut state.reader, cx);
        Poll::Pending
    }

    /// Stops waking the reader for now: it is about to read anyway (the body runs the work
    /// first, and what the work sends meanwhile goes out in the same chunk).
    pub fn quiet(&mut self) {
        self.shared.lock().reader = None;
    }

    /// Takes everything sent so far as one chunk, the final response framed last (and then
    /// `true`: the stream is over). `None` once every sender is gone with nothing left to read.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Vec<u8>, bool)>> {
        let mut state = self.shared.lock();
        let last = state.last.take();
        if state.queued == 0 && last.is_none() {
            if state.senders == 0 {
                return Poll::Ready(None);
            }
            register(&mut state.reader, cx);
            return Poll::Pending;
        }
        let was_full = state.full();
        let mut chunk = std::mem::take(&mut state.chunk);
        state.whole = 0;
        state.queued = 0;
        drop(state);
        if was_full {
            self.shared.room.notify_waiters();
        }
        let ended = last.is_some();
        if let Some(last) = last {
            chunk.reserve_exact(DATA_PREFIX.len() + last.body.len() + DATA_SUFFIX.len());
            frame_json(&mut chunk, |out| out.extend_from_slice(&last.body));
        }
        Poll::Ready(Some((chunk, ended)))
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.room.notify_waiters();
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Events")
    }
}

fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    /// A waker that counts its wake-ups.
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counted() -> (Arc<Counted>, Waker) {
        let counter = Arc::new(Counted(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    fn wakes(counter: &Counted) -> usize {
        counter.0.swap(0, Ordering::SeqCst)
    }

    fn note(n: u32) -> StreamEvent {
        StreamEvent::Notification(format!("{{\"n\":{n}}}").into_bytes())
    }

    fn last(body: &str) -> FinalResponse {
        FinalResponse {
            status: http::StatusCode::OK,
            body: body.as_bytes().to_vec(),
            outcome: super::super::ResponseOutcome::Ok,
        }
    }

    /// Sends into a stream that has room, without waiting.
    fn sent(tx: &Outbox, event: StreamEvent) -> Result<(), Closed> {
        tx.send(event).now_or_never().expect("a stream with room takes an event at once")
    }

    fn chunk(events: &mut Events, waker: &Waker) -> Poll<Option<(String, bool)>> {
        events
            .poll_chunk(&mut Context::from_waker(waker))
            .map(|c| c.map(|(bytes, ended)| (String::from_utf8(bytes).unwrap(), ended)))
    }

    #[test]
    fn a_final_response_with_nothing_before_it_is_answered_as_json() {
        let (tx, mut events) = channel(4);
        let (counter, waker) = counted();
        assert!(events.poll_first(&mut Context::from_waker(&waker)).is_pending());
        tx.send_final(last("{\"id\":1}")).unwrap();
        assert_eq!(wakes(&counter), 1, "the final response wakes the waiting reader");
        match events.poll_first(&mut Context::from_waker(&waker)) {
            Poll::Ready(First::Response(response)) => assert_eq!(response.body, b"{\"id\":1}"),
            _ => panic!("a final response alone is the JSON answer"),
        }
        assert_eq!(sent(&tx, note(1)), Err(Closed), "nothing is taken after the final response");
        assert_eq!(tx.send_final(last("{}")), Err(Closed), "nor a second final response");
    }

    #[test]
    fn what_was_sent_before_the_final_response_makes_a_stream_in_order() {
        let (tx, mut events) = channel(4);
        let (_, waker) = counted();
        sent(&tx, note(1)).unwrap();
        tx.send(StreamEvent::KeepAlive).now_or_never().unwrap().unwrap();
        sent(&tx, StreamEvent::ClientRequest { message: serde_json::json!({"id": "s1"}) }).unwrap();
        tx.send_final(last("{\"id\":1}")).unwrap();
        assert!(matches!(events.poll_first(&mut Context::from_waker(&waker)), Poll::Ready(First::Stream)));
        let expected = "event: message\ndata: {\"n\":1}\n\n: keep-alive\n\nevent: message\ndata: {\"id\":\"s1\"}\n\n\
                        event: message\ndata: {\"id\":1}\n\n";
        assert_eq!(chunk(&mut events, &waker), Poll::Ready(Some((expected.to_owned(), true))));
    }

    /// Large events fill a stream by their bytes before their count: a sender waits once a
    /// mebibyte is unread, however few events that is, and goes on when the body reads; an event
    /// larger than the whole bound is taken when nothing waits.
    #[test]
    fn a_stream_holds_a_bounded_number_of_unread_bytes() {
        let (tx, mut events) = channel(STREAM_CAPACITY);
        let (_, waker) = counted();
        let large = |bytes: usize| StreamEvent::Notification(format!("\"{}\"", "x".repeat(bytes)).into_bytes());
        sent(&tx, large(STREAM_MAX_UNREAD_BYTES / 2)).unwrap();
        sent(&tx, large(STREAM_MAX_UNREAD_BYTES / 2)).unwrap();
        let mut third = Box::pin(tx.send(note(3)));
        let (sender_counter, sender_waker) = counted();
        assert!(third.as_mut().poll(&mut Context::from_waker(&sender_waker)).is_pending(), "two events, a mebibyte");
        let Poll::Ready(Some((read, false))) = chunk(&mut events, &waker) else { panic!("two events to read") };
        assert!(read.len() > STREAM_MAX_UNREAD_BYTES);
        assert_eq!(wakes(&sender_counter), 1, "the read makes room");
        assert_eq!(third.as_mut().poll(&mut Context::from_waker(&sender_waker)), Poll::Ready(Ok(())));
        assert_eq!(
            chunk(&mut events, &waker),
            Poll::Ready(Some(("event: message\ndata: {\"n\":3}\n\n".to_owned(), false)))
        );
        sent(&tx, large(2 * STREAM_MAX_UNREAD_BYTES)).expect("alone, an event larger than the bound is taken");
    }

    #[test]
    fn a_full_stream_holds_its_senders_until_the_body_reads_and_the_final_response_never_waits() {
        let (tx, mut events) = channel(2);
        let (counter, waker) = counted();
        sent(&tx, note(1)).unwrap();
        sent(&tx, note(2)).unwrap();
        let mut third = Box::pin(tx.send(note(3)));
        let (sender_counter, sender_waker) = counted();
        assert!(third.as_mut().poll(&mut Context::from_waker(&sender_waker)).is_pending(), "two is the capacity");
        tx.send_final(last("{\"id\":1}")).unwrap_or_else(|_| panic!("the final response has its own slot"));
        assert_eq!(wakes(&sender_counter), 1, "a sender waiting for room learns that the stream ended");
        assert_eq!(third.as_mut().poll(&mut Context::from_waker(&sender_waker)), Poll::Ready(Err(Closed)));
        let read = chunk(&mut events, &waker);
        assert_eq!(
            read,
            Poll::Ready(Some((
                "event: message\ndata: {\"n\":1}\n\nevent: message\ndata: {\"n\":2}\n\nevent: message\ndata: {\"id\":1}\n\n"
                    .to_owned(),
                true
            )))
        );
        assert_eq!(wakes(&counter), 0);

        let (tx, mut events) = channel(2);
        sent(&tx, note(1)).unwrap();
        sent(&tx, note(2)).unwrap();
        let mut third = Box::pin(tx.send(note(3)));
        assert!(third.as_mut().poll(&mut Context::from_waker(&sender_waker)).is_pending());
        assert!(chunk(&mut events, &waker).is_ready());
        assert_eq!(wakes(&sender_counter), 1, "reading makes room and wakes the waiting sender");
        assert_eq!(third.as_mut().poll(&mut Context::from_waker(&sender_waker)), Poll::Ready(Ok(())));
        assert_eq!(
            chunk(&mut events, &waker),
            Poll::Ready(Some(("event: message\ndata: {\"n\":3}\n\n".to_owned(), false)))
        );
    }

    #[test]
    fn a_reader_is_woken_by_a_send_unless_it_said_it_is_about_to_read() {
        let (tx, mut events) = channel(4);
        let (counter, waker) = counted();
        assert_eq!(chunk(&mut events, &waker), Poll::Pending);
        sent(&tx, note(1)).unwrap();
        sent(&tx, note(2)).unwrap();
        assert_eq!(wakes(&counter), 1, "one wake-up for what arrived while it waited");
        assert!(chunk(&mut events, &waker).is_ready());
        assert_eq!(chunk(&mut events, &waker), Poll::Pending);
        events.quiet();
        sent(&tx, note(3)).unwrap();
        assert_eq!(wakes(&counter), 0, "a reader about to read is not woken");
        assert_eq!(
            chunk(&mut events, &waker),
            Poll::Ready(Some(("event: message\ndata: {\"n\":3}\n\n".to_owned(), false)))
        );
    }

    #[test]
    fn when_the_body_goes_every_send_fails_and_closed_resolves() {
        let (tx, events) = channel(1);
        let other = tx.clone();
        sent(&tx, note(1)).unwrap();
        let mut waiting = Box::pin(other.send(note(2)));
        let mut closed = Box::pin(tx.closed());
        let (counter, waker) = counted();
        let mut cx = Context::from_waker(&waker);
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        assert!(closed.as_mut().poll(&mut cx).is_pending());
        assert!(!tx.is_closed());
        drop(events);
        assert_eq!(wakes(&counter), 2, "the waiting sender and the closed() future are woken");
        assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Ready(Err(Closed)));
        assert!(closed.as_mut().poll(&mut cx).is_ready());
        assert!(tx.is_closed());
        assert_eq!(sent(&tx, note(3)), Err(Closed));
        assert_eq!(tx.send_final(last("{}")), Err(Closed));
    }

    #[test]
    fn a_frame_writer_that_panics_leaves_no_half_frame_behind() {
        let (tx, mut events) = channel(4);
        let (_, waker) = counted();
        sent(&tx, note(1)).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tx.send_with(|out| {
                out.extend_from_slice(b"{\"half");
                panic!("a writer fails midway");
            })
            .now_or_never()
        }));
        assert!(panicked.is_err());
        sent(&tx, note(2)).unwrap();
        let expected = "event: message\ndata: {\"n\":1}\n\nevent: message\ndata: {\"n\":2}\n\n";
        assert_eq!(chunk(&mut events, &waker), Poll::Ready(Some((expected.to_owned(), false))));
    }

    #[test]
    fn when_every_sender_goes_without_a_final_response_the_stream_ends_after_what_was_sent() {
        let (tx, mut events) = channel(4);
        let (counter, waker) = counted();
        let other = tx.clone();
        sent(&other, note(1)).unwrap();
        drop(other);
        assert_eq!(
            chunk(&mut events, &waker),
            Poll::Ready(Some(("event: message\ndata: {\"n\":1}\n\n".to_owned(), false)))
        );
        assert_eq!(chunk(&mut events, &waker), Poll::Pending, "one sender is still there");
        drop(tx);
        assert_eq!(wakes(&counter), 1, "the last sender leaving wakes the reader");
        assert_eq!(chunk(&mut events, &waker), Poll::Ready(None));

        let (tx, mut events) = channel(4);
        drop(tx);
        assert!(matches!(events.poll_first(&mut Context::from_waker(&waker)), Poll::Ready(First::Gone)));
    }
}
