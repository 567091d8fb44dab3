//! Observability: one structured JSON line per request, job lifecycle events, and panic
//! containment, all redacted by construction.
//!
//! A log line is built from a fixed set of fields, never from free text supplied by a client:
//! identifiers are hashed with a key derived from the sealing key (so they are stable across
//! instances but not reversible by guessing), arguments appear only as a keyed digest, and
//! tokens, secrets, `requestState` and handles have no field to go into. Panics are caught by
//! the transport; the hook installed here records where they happened and withholds their
//! message unless it is a literal (a formatted message may carry request data).

use serde_json::{Value, json};
use std::cell::RefCell;
use std::hash::Hasher;
use std::sync::{Arc, Mutex, Once};
use std::time::Instant;

use crate::state::clock::write_iso8601;
use crate::state::{Random, Sealer};

/// Where log lines go. Vercel captures stdout and stderr; tests capture in memory.
pub trait LogSink: Send + Sync + 'static {
    /// Writes one complete line (without the newline).
    fn emit(&self, line: String);
}

tokio::task_local! {
    /// The sink of the request being served, when the edge has one (Vercel's per-request log
    /// channel): lines logged while serving it go there, tagged with the request.
    static REQUEST_SINK: Arc<dyn LogSink>;
}

/// Runs `future` (one request's handling) with its log lines going to `sink` instead of the
/// logger's own. Work that outlives the request (background jobs, exports) logs as before.
///
/// A plain function returning tokio's scoping future, not an `async fn`: one that awaited
/// `future` would hold it twice (as its argument and inside the future it awaits), and the
/// request's future is several kilobytes that the runtime copies into a box per request.
pub fn with_request_sink<F: std::future::Future>(
    sink: Arc<dyn LogSink>,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    REQUEST_SINK.scope(sink, future)
}

/// Runs `f` (a step of one request's work done outside its future: a frame of its streamed
/// body) with its log lines going to `sink`, as [`with_request_sink`] does for the future.
pub fn in_request_sink<R>(sink: Arc<dyn LogSink>, f: impl FnOnce() -> R) -> R {
    REQUEST_SINK.sync_scope(sink, f)
}

/// Lines to standard error, each in one `write` and without std's lock on stderr: every worker
/// logs a line per request, and two lines meeting on that lock cost a futex sleep and wake-up
/// (0.63 futex calls a request at 64 connections, measured with `strace -c -f`). One `write` of at
/// most `PIPE_BUF` bytes to a pipe is never interleaved with another (POSIX), and on Linux one
/// `write` to a file lands whole; such writes share a read lock, which costs no system call. A
/// longer line, which the kernel may split, takes that lock exclusively, so no line of this sink
/// lands inside it. (Other writers to stderr, `eprintln!` and the panic hook, are not ordered with
/// this sink's lines.)
///
/// On a runtime worker set up by [`hold_lines_until_idle`], lines are held and written together:
/// stderr is a pipe wherever a platform collects logs, and a `write` per request to a pipe, which
/// also wakes its reader, cost 30% of the throughput at 64 connections (performance.md). Such a
/// write may be longer than `PIPE_BUF`: it takes the lock alone, so no line of this sink lands
/// inside it, but when the pipe is nearly full a writer outside the sink (`eprintln!`, the panic
/// hook, another process on the same pipe) can.
#[derive(Debug, Clone)]
pub struct StderrSink(Arc<StderrOut>);

#[derive(Debug)]
struct StderrOut {
    /// A duplicate of file descriptor 2, written through `&File` (which has no lock).
    out: Option<std::fs::File>,
}

/// Shared by writes of whole lines, held alone by longer ones: one for the process, since every
/// sink writes to standard error.
static LONG_LINES: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The longest write that lands whole: `PIPE_BUF` (POSIX's minimum elsewhere).
const WHOLE_WRITE_MAX: usize = if cfg!(target_os = "linux") { 4096 } else { 512 };

/// The most a worker holds before it writes (in one write, under the exclusive lock): each write
/// wakes the pipe's reader, which then competes for the same cores. 16 KiB wrote a third as often
/// as `PIPE_BUF` and served 5% more at 64 connections; 64 KiB saved little more (performance.md).
const HELD_MAX: usize = 16 * 1024;

impl Default for StderrSink {
    fn default() -> Self {
        use std::os::fd::AsFd;
        let out = std::io::stderr().as_fd().try_clone_to_owned().ok().map(std::fs::File::from);
        Self(Arc::new(StderrOut { out }))
    }
}

impl StderrSink {
    /// Lines to `out` instead (tests).
    #[cfg(test)]
    fn to(out: std::fs::File) -> Self {
        Self(Arc::new(StderrOut { out: Some(out) }))
    }
}

impl StderrOut {
    /// Writes complete lines: in one `write` when they fit in `WHOLE_WRITE_MAX`, else alone.
    fn write(&self, lines: &[u8]) {
        use std::io::Write;
        let Some(mut out) = self.out.as_ref() else {
            let _ = std::io::stderr().lock().write_all(lines);
            return;
        };
        // Held until the lines are written. A poisoned lock guards nothing (its data is `()`).
        let (_shared, _alone);
        if lines.len() <= WHOLE_WRITE_MAX {
            _shared = LONG_LINES.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        } else {
            _alone = LONG_LINES.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let _ = out.write_all(lines);
    }
}

/// The lines a runtime worker holds until it next goes idle.
struct HeldLines {
    /// Set when a worker of a runtime that [`hold_lines_until_idle`] set up goes idle after
    /// logging more than one line since it last did: only such a thread is sure to write its
    /// lines out soon, and only when lines come faster than it goes idle does holding them save
    /// writes (one line an idle moment would only be written later).
    holding: bool,
    /// Lines logged since the thread last went idle.
    since_idle: u32,
    to: Option<Arc<StderrOut>>,
    lines: Vec<u8>,
}

impl HeldLines {
    fn write_out(&mut self) {
        if let Some(to) = self.to.take()
            && !self.lines.is_empty()
        {
            to.write(&self.lines);
        }
        self.lines.clear();
    }
}

/// A thread that ends without its runtime's stop hook (one that a panic ended, or a line logged
/// by another thread-local's destructor after the hook) still writes what it holds.
impl Drop for HeldLines {
    fn drop(&mut self) {
        self.write_out();
    }
}

thread_local! {
    static HELD_LINES: RefCell<HeldLines> =
        const { RefCell::new(HeldLines { holding: false, since_idle: 0, to: None, lines: Vec::new() }) };
}

/// Runs `f` on this thread's held lines; `None` while the thread is being torn down, or while
/// they are already borrowed further up its stack (then the caller writes at once).
fn with_held_lines<T>(f: impl FnOnce(&mut HeldLines) -> T) -> Option<T> {
    HELD_LINES.try_with(|held| held.try_borrow_mut().ok().map(|mut held| f(&mut held))).ok().flatten()
}

/// Sets up `builder`'s worker threads to hold the lines of every [`StderrSink`] and write them
/// together, in writes of at most 16 KiB of whole lines: when the worker is about to go idle, when
/// the next line would not fit, and when the worker stops. A worker holds lines only
/// while they come faster than it goes idle (more than one between two idle moments); otherwise,
/// as at low load, each line is written at once. Under load a worker writes every few dozen
/// lines. A held line waits only while its worker keeps running other work, including tasks that
/// keep yielding (a worker with only yielded tasks does not park). A process killed outright, or
/// one that exits while its runtime is still shutting down (`shutdown_timeout`,
/// `shutdown_background`), loses at most the lines its workers held (up to 16 KiB each). Threads
/// that are not the runtime's workers (`spawn_blocking`, `block_on`, other runtimes) write each
/// line at once; a worker that `block_in_place` turns into a blocking thread goes on holding until
/// it goes idle as a worker again or stops. Across workers, lines are not written in the order
/// they were logged (each worker's own are): `ts` orders them. This replaces any park and stop
/// hooks set on `builder` before.
pub fn hold_lines_until_idle(builder: &mut tokio::runtime::Builder) -> &mut tokio::runtime::Builder {
    builder.on_thread_park(going_idle).on_thread_stop(write_held_lines)
}

/// A worker is about to park: it writes out the lines it holds, and holds the next ones if it
/// logged more than one since it last went idle.
fn going_idle() {
    with_held_lines(|held| {
        held.holding = held.since_idle > 1;
        held.since_idle = 0;
        held.write_out();
    });
}

/// Writes out the lines this thread holds, if any.
fn write_held_lines() {
    with_held_lines(HeldLines::write_out);
}

impl LogSink for StderrSink {
    fn emit(&self, mut line: String) {
        // One write per line at most (eprintln! would issue the newline separately).
        line.push('\n');
        let held = with_held_lines(|held| {
            held.since_idle = held.since_idle.saturating_add(1);
            if !held.holding {
                return false; // and holds nothing: it wrote out what it held when it stopped holding
            }
            if line.len() > WHOLE_WRITE_MAX {
                // Written alone, after what this thread holds, so that its lines stay in order.
                held.write_out();
                return false;
            }
            let same_sink = held.to.as_ref().is_some_and(|to| Arc::ptr_eq(to, &self.0));
            if !same_sink || held.lines.len() + line.len() > HELD_MAX {
                held.write_out();
                held.to = Some(Arc::clone(&self.0));
                held.lines.reserve(HELD_MAX);
            }
            held.lines.extend_from_slice(line.as_bytes());
            true
        });
        if held != Some(true) {
            self.0.write(line.as_bytes());
        }
    }
}

/// Lines kept in memory (tests).
#[derive(Debug, Default)]
pub struct MemorySink(Mutex<Vec<String>>);

impl MemorySink {
    /// Every line so far, parsed.
    pub fn lines(&self) -> Vec<Value> {
        self.0.lock().expect("log lock").iter().map(|l| serde_json::from_str(l).expect("log lines are JSON")).collect()
    }

    /// Every line so far, raw.
    pub fn raw(&self) -> Vec<String> {
        self.0.lock().expect("log lock").clone()
    }
}

impl LogSink for MemorySink {
    fn emit(&self, line: String) {
        self.0.lock().expect("log lock").push(line);
    }
}

/// The digest namespace of principal ids.
const PRINCIPAL: &str = "principal";

/// The id of the unauthenticated caller (`security::Principal::anonymous`): defined here, below
/// the principal, so that the logger can keep its digest.
pub(crate) const ANONYMOUS_ID: &str = "anonymous";

/// Where the process's id numbers come from: each thread takes a block of them at a time, so the
/// request path does not move one shared counter between the cores on every request.
static NEXT_ID_BLOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
const ID_BLOCK: u64 = 1024;

thread_local! {
    /// The next number of this thread's block, and the end of the block.
    static ID_NUMBERS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A number no other caller in this process has had. (The thread-local is a `const` `Cell` with
/// nothing to drop, so it is there even while its thread is torn down.)
fn next_sequence() -> u64 {
    ID_NUMBERS.with(|numbers| {
        let (mut next, mut end) = numbers.get();
        if next == end {
            next = NEXT_ID_BLOCK.fetch_add(ID_BLOCK, std::sync::atomic::Ordering::Relaxed);
            end = next + ID_BLOCK;
        }
        numbers.set((next + 1, end));
        next
    })
}

/// Which requests get a request line (`MCP_REQUEST_LOG`).
///
/// On a Vercel Function a line per request is one message per request on the runtime's IPC
/// socket, a write and a wake-up of its reader. At 64 connections leaving it out served 16–20%
/// more on that socket (a stand-in for the platform's end) and a third more with the lines on a
/// pipe (docs/performance.md, "A line per request"; the local run, which writes its busy workers'
/// lines together, about a tenth). `Failures` keeps the lines an operator acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RequestLines {
    /// Every request (the default).
    #[default]
    All,
    /// Only requests that did not succeed: an HTTP status of 400 or above, a JSON-RPC error (a
    /// contained panic is one), a refused token, a tool result with `isError`; and every stream,
    /// whose outcome is not known when its line is written (the line reads `ok`). Event lines (job lifecycle, faults,
    /// panics) are written as before.
    Failures,
}

/// Lets a report through at most once per period, however many callers race: for lines that
/// callers other than the platform can cause (a public route's refusals), so that they cannot
/// fill the log, while an operator still learns of the fault.
#[derive(Debug, Default)]
pub struct Throttle {
    /// When (clock ms, plus one; 0 for never) a report was last let through.
    last: std::sync::atomic::AtomicU64,
}

impl Throttle {
    /// Whether a report is due at `now_ms`: the first, then one each `every_ms` at most.
    pub fn due(&self, now_ms: u64, every_ms: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let now = now_ms.saturating_add(1);
        let last = self.last.load(Relaxed);
        (last == 0 || now.saturating_sub(last) >= every_ms)
            && self.last.compare_exchange(last, now, Relaxed, Relaxed).is_ok()
    }
}

/// Keyed digests and ids for log lines.
#[derive(Clone)]
pub struct Logger {
    sink: Arc<dyn LogSink>,
    /// Which requests [`RequestRecord::finish`] writes a line for.
    request_lines: RequestLines,
    /// The clock every other part reads, so log times agree with record times (and tests pin them).
    clock: Arc<dyn crate::state::Clock>,
    digest_key: (u64, u64),
    id_prefix: Arc<str>,
    /// The digest of the unauthenticated caller's id, which most requests of an open server log.
    anonymous_principal: Digest,
}

impl std::fmt::Debug for Logger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Logger")
    }
}

impl Logger {
    /// The time by the logger's clock (the one its lines carry), in milliseconds.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Writes a line to the current request's sink if the edge set one, else to this logger's.
    fn emit(&self, line: String) {
        match REQUEST_SINK.try_with(Arc::clone) {
            Ok(sink) => sink.emit(line),
            Err(_) => self.sink.emit(line),
        }
    }

    /// A logger writing to `sink`, hashing with `sealer`'s current key.
    pub fn new(sink: Arc<dyn LogSink>, sealer: Sealer, random: Arc<dyn Random>) -> Self {
        let mut bytes = [0u8; 8];
        random.fill(&mut bytes);
        let derived = sealer.derive_key("log-digests");
        let word = |range: std::ops::Range<usize>| u64::from_le_bytes(derived[range].try_into().expect("8 bytes"));
        let digest_key = (word(0..8), word(8..16));
        let mut logger = Self {
            sink,
            request_lines: RequestLines::All,
            clock: sealer.clock().clone(),
            digest_key,
            id_prefix: Arc::from(crate::state::seal::hex(&bytes).as_str()),
            anonymous_principal: HexText([0; 16]),
        };
        logger.anonymous_principal = logger.digest(PRINCIPAL, ANONYMOUS_ID.as_bytes());
        logger
    }

    /// This logger, with `lines` deciding which requests get a request line.
    pub fn with_request_lines(mut self, lines: RequestLines) -> Self {
        self.request_lines = lines;
        self
    }

    /// [`Logger::digest`] of a principal's id; the anonymous caller's is computed once.
    pub fn principal_digest(&self, id: &str) -> Digest {
        if id == ANONYMOUS_ID { self.anonymous_principal } else { self.digest(PRINCIPAL, id.as_bytes()) }
    }

    /// A stable, non-reversible digest of an identifier (`kind` separates namespaces): SipHash-2-4
    /// (a keyed PRF) under a key derived from the sealing key, so digests agree across instances
    /// of a deployment while nobody without the key can confirm a guess. It runs on every request,
    /// where HMAC-SHA256 cost several times more for no benefit here.
    pub fn digest(&self, kind: &str, value: &[u8]) -> Digest {
        self.digest_with(kind, |hasher| hasher.write(value))
    }

    /// [`Logger::digest`] of `value`'s compact JSON text, hashed as it is serialised (never
    /// copied whole: arguments may be large).
    pub fn digest_json(&self, kind: &str, value: &Value) -> Digest {
        /// Gathers the serialiser's many small writes (a quote, a key, a colon) into one hash
        /// update per 256 bytes: each update has a fixed cost larger than its few bytes.
        struct Feed<'a> {
            hasher: &'a mut dyn Hasher,
            buffer: [u8; 256],
            len: usize,
        }
        impl Feed<'_> {
            fn drain(&mut self) {
                self.hasher.write(&self.buffer[..self.len]);
                self.len = 0;
            }
        }
        impl std::io::Write for Feed<'_> {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                if self.len + bytes.len() > self.buffer.len() {
                    self.drain();
                }
                if bytes.len() >= self.buffer.len() {
                    self.hasher.write(bytes);
                } else {
                    self.buffer[self.len..self.len + bytes.len()].copy_from_slice(bytes);
                    self.len += bytes.len();
                }
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                self.drain();
                Ok(())
            }
        }
        // SipHash is streaming: the chunks hash exactly as the whole text would.
        self.digest_with(kind, |hasher| {
            let mut feed = Feed { hasher, buffer: [0; 256], len: 0 };
            serde_json::to_writer(&mut feed, value).expect("values serialise");
            feed.drain();
        })
    }

    fn digest_with(&self, kind: &str, feed: impl FnOnce(&mut dyn Hasher)) -> Digest {
        let mut hasher = siphasher::sip::SipHasher24::new_with_keys(self.digest_key.0, self.digest_key.1);
        hasher.write(kind.as_bytes());
        hasher.write_u8(0xff);
        feed(&mut hasher);
        let mut digest = HexText([0; 16]);
        crate::state::seal::write_hex(&mut digest.0, &hasher.finish().to_be_bytes());
        digest
    }

    /// A fresh id (16 hex digits: this logger's random prefix, then a number no other id of the
    /// process has had).
    pub fn new_id(&self) -> String {
        self.next_id().as_str().to_owned()
    }

    /// [`Logger::new_id`] as a request's shared id, allocated once.
    pub fn new_request_id(&self) -> Arc<str> {
        Arc::from(self.next_id().as_str())
    }

    fn next_id(&self) -> HexText<16> {
        // Unique, not secret: a random per-process prefix and a counter, so the request path
        // makes no system call for it.
        let sequence = next_sequence() as u32;
        self.prefixed_id(&sequence.to_be_bytes())
    }

    /// A fresh W3C trace id (32 hex digits, never all zero).
    pub fn new_trace_id(&self) -> String {
        // The top bit keeps it from being all zero without making two numbers one id.
        let sequence = next_sequence() | 1 << 63;
        self.prefixed_id::<32>(&sequence.to_be_bytes()).as_str().to_owned()
    }

    /// `N` digits: the process's prefix, then `suffix` in hex, built on the stack.
    fn prefixed_id<const N: usize>(&self, suffix: &[u8]) -> HexText<N> {
        let prefix_len = N - 2 * suffix.len();
        let mut id = HexText([0; N]);
        id.0[..prefix_len].copy_from_slice(&self.id_prefix.as_bytes()[..prefix_len]);
        crate::state::seal::write_hex(&mut id.0[prefix_len..], suffix);
        id
    }

    /// Logs a panic that was contained where `id_field` (`requestId`, `correlationId`) names the
    /// id its caller is told: where it happened (from the panic hook's record on this thread,
    /// which this takes, so a later panic never reports it), never its message.
    pub fn contained_panic(&self, id_field: &str, id: &str) {
        let location = take_panic_location();
        self.event("error", "panic", json!({ id_field: id, "location": location }));
    }

    /// A store or queue fault as the caller sees it: `description` (already free of URLs and
    /// keys) plus a fresh correlation id, which a warn line `event` carries too with the
    /// operation, so an operator can find the one behind a user's report.
    pub fn fault(&self, event: &str, operation: &str, description: &str) -> String {
        let id = self.new_id();
        self.event("warn", event, json!({ "correlationId": id, "operation": operation, "detail": description }));
        format!("{description} (correlation id {id})")
    }

    /// Emits an event line: `fields` must hold only ids, digests, counts and fixed words. The
    /// line starts as the request line does (`ts`, `level`, `event`); a field of one of those
    /// names is left out, so each appears once and means what the line's own says.
    pub fn event(&self, level: &str, event: &str, fields: Value) {
        let mut line = self.begin_event(level, event);
        if let Value::Object(fields) = &fields {
            for (name, value) in fields.iter().filter(|(name, _)| !matches!(name.as_str(), "ts" | "level" | "event")) {
                line.push(b',');
                serde_json::to_writer(&mut line, name).expect("strings serialise");
                line.push(b':');
                serde_json::to_writer(&mut line, value).expect("values serialise");
            }
        }
        line.push(b'}');
        self.emit(String::from_utf8(line).expect("serde_json writes UTF-8"));
    }

    /// [`Logger::event`] for fields fixed in code: `fields` is a struct with named fields (none
    /// of them `ts`, `level` or `event`), written straight into the line with no `Value` built
    /// (the job service logs one on every submit and poll, and the worker two a job). Anything
    /// that does not serialise as an object goes through [`Logger::event`] instead, so the line
    /// is always one JSON object.
    pub fn event_of(&self, level: &str, event: &str, fields: &impl serde::Serialize) {
        let mut line = self.begin_event(level, event);
        let at = line.len();
        if serde_json::to_writer(&mut line, fields).is_err() || line.get(at) != Some(&b'{') {
            return self.event(level, event, serde_json::to_value(fields).unwrap_or_default());
        }
        debug_assert!(
            serde_json::from_slice::<serde_json::Map<String, Value>>(&line[at..]).is_ok_and(|fields| ![
                "ts", "level", "event"
            ]
            .iter()
            .any(|name| fields.contains_key(*name))),
            "event fields name none of the line's own members"
        );
        if line.len() == at + 2 {
            line.truncate(at); // `{}`: no fields
        } else {
            // The object's opening brace becomes the comma after `event`; its closing one ends the line.
            line[at] = b',';
            line.pop();
        }
        line.push(b'}');
        self.emit(String::from_utf8(line).expect("serde_json writes UTF-8"));
    }

    /// `{"ts":…,"level":…,"event":…` of an event line. Written into bytes as the request line
    /// is: `Value`'s `Display` goes through the formatting machinery a few bytes at a time, and
    /// cost several times as much.
    fn begin_event(&self, level: &str, event: &str) -> Vec<u8> {
        let mut line: Vec<u8> = Vec::with_capacity(256);
        line.extend_from_slice(b"{\"ts\":\"");
        write_iso8601(&mut line, self.clock.now_ms());
        line.extend_from_slice(b"\",\"level\":");
        serde_json::to_writer(&mut line, level).expect("strings serialise");
        line.extend_from_slice(b",\"event\":");
        serde_json::to_writer(&mut line, event).expect("strings serialise");
        line
    }
}

/// `N` hex digits held inline, on the stack until it is known where they go: request and trace
/// ids, and the keyed digests a request logs (as `String`s they were an allocation each). It reads
/// as a `&str` and serialises as a JSON string.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HexText<const N: usize>([u8; N]);

/// A keyed digest as it is logged ([`Logger::digest`]): 16 hex digits.
pub type Digest = HexText<16>;

impl<const N: usize> HexText<N> {
    /// The digits.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }

    /// The digits' bytes, without the UTF-8 check of [`HexText::as_str`] (for text being built as
    /// bytes).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl<const N: usize> std::ops::Deref for HexText<N> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> std::fmt::Display for HexText<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<const N: usize> std::fmt::Debug for HexText<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> serde::Serialize for HexText<N> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What one request did, filled in as the pipeline learns it.
#[derive(Debug)]
pub struct RequestRecord {
    started: Instant,
    /// Server-assigned id, also sent back as `x-mcp-request-id` and shared with the handler.
    pub request_id: Arc<str>,
    /// W3C trace id.
    pub trace_id: String,
    /// `modern` or `legacy`.
    pub era: Option<&'static str>,
    /// The JSON-RPC method: borrowed from the transport's table of known methods (and then it
    /// names its own metric series), or a copy of an unknown one (counted as `other`).
    pub method: Option<std::borrow::Cow<'static, str>>,
    /// Tool or prompt name, or resource URI.
    pub name: Option<String>,
    /// Keyed digest of the principal id.
    pub principal: Option<Digest>,
    /// Keyed digest of the arguments.
    pub arguments: Option<Digest>,
    /// When the request arrived, by the logger's clock (ms since the epoch): its span starts then.
    pub started_at_ms: u64,
    /// The request's span, once it is known which trace it belongs to.
    pub span: Option<crate::telemetry::SpanHandle>,
}

impl RequestRecord {
    /// How long the request has taken so far.
    pub fn elapsed(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Starts a record.
    pub fn start(logger: &Logger) -> Self {
        Self {
            started: Instant::now(),
            request_id: logger.new_request_id(),
            trace_id: String::new(),
            era: None,
            method: None,
            name: None,
            principal: None,
            arguments: None,
            started_at_ms: logger.clock.now_ms(),
            span: None,
        }
    }

    /// Starts a record for a request that came in at `arrived`: its latency counts from then.
    pub fn start_at(logger: &Logger, arrived: Instant) -> Self {
        let waited = u64::try_from(arrived.elapsed().as_millis()).unwrap_or(u64::MAX);
        Self { started: arrived, started_at_ms: logger.clock.now_ms().saturating_sub(waited), ..Self::start(logger) }
    }

    /// Emits the request line, unless the logger writes failures only and this request succeeded.
    /// `outcome` is a fixed word; `code` a JSON-RPC code. A stream's line is written when it opens,
    /// before its outcome is known, so a stream always has one.
    pub fn finish(self, logger: &Logger, status: u16, outcome: crate::body::ResponseOutcome, stream: bool) {
        let succeeded = !stream && status < 400 && outcome == crate::body::ResponseOutcome::Ok;
        if succeeded && logger.request_lines == RequestLines::Failures {
            return;
        }
        // `ResponseOutcome::level` decides. A contained panic is always an error in its own `panic`
        // event (which carries this request's id and where it happened); its request line says
        // 500 where the answer does, and 200 in the 2025-11-25 era or after a stream's head.
        let level = outcome.level(status);
        let latency_ms = (self.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0;
        // Written member by member, each name with its punctuation in one constant: this line is on
        // every request's path. Ids, digests and fixed words are known-safe text; only the method
        // and the name (client-supplied) may need JSON escaping.
        let mut line: Vec<u8> = Vec::with_capacity(384);
        line.extend_from_slice(b"{\"ts\":\"");
        write_iso8601(&mut line, logger.clock.now_ms());
        line.extend_from_slice(b"\",\"level\":\"");
        line.extend_from_slice(level.as_bytes());
        line.extend_from_slice(b"\",\"event\":\"request\"");
        let member = |line: &mut Vec<u8>, name_and_colon: &[u8], value: Option<&[u8]>| {
            line.extend_from_slice(name_and_colon);
            match value {
                Some(value) => {
                    line.push(b'"');
                    line.extend_from_slice(value);
                    line.push(b'"');
                }
                None => line.extend_from_slice(b"null"),
            }
        };
        member(&mut line, b",\"requestId\":", Some(self.request_id.as_bytes()));
        member(&mut line, b",\"traceId\":", Some(self.trace_id.as_bytes()));
        member(&mut line, b",\"era\":", self.era.map(str::as_bytes));
        line.extend_from_slice(b",\"method\":");
        push_json_text(&mut line, self.method.as_deref());
        line.extend_from_slice(b",\"name\":");
        push_json_text(&mut line, self.name.as_deref());
        member(&mut line, b",\"principal\":", self.principal.as_ref().map(HexText::as_bytes));
        member(&mut line, b",\"arguments\":", self.arguments.as_ref().map(HexText::as_bytes));
        member(&mut line, b",\"outcome\":", Some(outcome.label().as_bytes()));
        // Numbers go through serde_json's integer and float writers, not the formatting machinery.
        line.extend_from_slice(b",\"status\":");
        serde_json::to_writer(&mut line, &status).expect("numbers serialise");
        line.extend_from_slice(b",\"code\":");
        serde_json::to_writer(&mut line, &outcome.code()).expect("numbers serialise");
        line.extend_from_slice(if stream { b",\"stream\":true" } else { b",\"stream\":false" });
        line.extend_from_slice(b",\"latencyMs\":");
        serde_json::to_writer(&mut line, &latency_ms).expect("numbers serialise");
        line.push(b'}');
        let line = String::from_utf8(line).expect("the line is UTF-8");
        logger.emit(line);
    }
}

/// Appends `text` as a JSON string, or `null`. Text with nothing to escape (no control character,
/// quote or backslash: what serde_json escapes) is copied as it is, which is what serde_json would
/// write; anything else goes through serde_json.
fn push_json_text(line: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') => {
            line.push(b'"');
            line.extend_from_slice(text.as_bytes());
            line.push(b'"');
        }
        Some(text) => serde_json::to_writer(&mut *line, text).expect("strings serialise"),
        None => line.extend_from_slice(b"null"),
    }
}

/// Logs the trace exports that failed since the last such line, at most one a minute: a
/// `telemetry.export_failed` warning with how many and the last status (never the endpoint or
/// its headers, which carry the backend's credential). A wrong `OTEL_EXPORTER_OTLP_HEADERS`
/// otherwise shows only as an empty backend. The edges call it after each flush.
pub fn report_export_failures(logger: &Logger, telemetry: &crate::telemetry::Telemetry) {
    const EVERY_MS: u64 = 60_000;
    if let Some(failed) = telemetry.unreported_export_failures(logger.clock.now_ms(), EVERY_MS) {
        logger.event(
            "warn",
            "telemetry.export_failed",
            json!({ "droppedSpans": failed.dropped_spans, "failures": failed.count, "lastStatus": failed.last_status }),
        );
    }
}

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
    static IN_HANDLER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `poll` marked as handler code: a panic inside it is recorded quietly for the transport
/// to log (the default hook would print its message, which may carry request data).
pub fn in_handler<T>(poll: impl FnOnce() -> T) -> T {
    /// Puts the thread's mark back as it was, on return and on unwinding alike: handler polls
    /// nest (a stream's work contains the handler's own), and a panic caught inside must leave
    /// the outer one still marked.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_HANDLER.with(|flag| flag.set(self.0));
        }
    }
    let _restore = Restore(IN_HANDLER.with(|flag| flag.replace(true)));
    poll()
}

/// Installs the panic hook: panics in handler code are recorded (location, and a literal
/// message only); every other panic goes to the previous hook unchanged.
pub fn install_panic_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_HANDLER.with(|flag| flag.get()) {
                return previous(info);
            }
            let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            let message = match info.payload().downcast_ref::<&'static str>() {
                Some(literal) => (*literal).to_owned(),
                None => "<formatted message withheld>".to_owned(),
            };
            LAST_PANIC.with(|last| *last.borrow_mut() = Some(format!("{location}: {message}")));
        }));
    });
}

/// The location of the last panic on this thread, taken.
pub fn take_panic_location() -> Option<String> {
    LAST_PANIC.with(|last| last.borrow_mut().take())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ManualClock, SeededRandom};

    /// The scope adds the sink and its bookkeeping to the request's future, not a second copy of
    /// it (an `async fn` awaiting its argument holds it twice, and the Vercel runtime copies the
    /// whole future into a box per request).
    #[test]
    fn a_request_sink_does_not_hold_the_request_twice() {
        let request = async {
            let held = [7u8; 4096];
            std::future::ready(()).await;
            held.len()
        };
        let alone = std::mem::size_of_val(&request);
        assert!(alone >= 4096, "the stand-in request holds its buffer across an await");
        let scoped = with_request_sink(Arc::new(MemorySink::default()), request);
        let size = std::mem::size_of_val(&scoped);
        assert!(size < alone + 128, "{size} bytes around a {alone}-byte future");
        let served = tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(scoped);
        assert_eq!(served, 4096);
    }

    /// A logger writing to memory, on `clock`, with a fixed key and seed.
    fn logger_to_memory(clock: Arc<ManualClock>) -> (Arc<MemorySink>, Logger) {
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock).unwrap();
        let sink = Arc::new(MemorySink::default());
        let logger = Logger::new(sink.clone(), sealer, Arc::new(SeededRandom::new(1)));
        (sink, logger)
    }

    fn logger() -> Logger {
        let clock = Arc::new(ManualClock::new(0));
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock).unwrap();
        Logger::new(Arc::new(StderrSink::default()), sealer, Arc::new(SeededRandom::new(1)))
    }

    #[test]
    fn ids_are_unique_across_threads_and_loggers() {
        // Each thread takes more than a block, so blocks run out and are replaced concurrently.
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..3 * ID_BLOCK).map(|_| next_sequence()).collect::<Vec<_>>()))
            .collect();
        let numbers: Vec<u64> = threads.into_iter().flat_map(|t| t.join().expect("no panic")).collect();
        let distinct: std::collections::HashSet<_> = numbers.iter().collect();
        assert_eq!(distinct.len(), numbers.len(), "no number is handed out twice");
        let first = logger();
        let ids: std::collections::HashSet<_> = (0..2000).map(|_| first.new_id()).collect();
        assert_eq!(ids.len(), 2000);
        assert!(ids.iter().all(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())));
        let traces: std::collections::HashSet<_> = (0..2000).map(|_| first.new_trace_id()).collect();
        assert_eq!(traces.len(), 2000, "trace ids are unique too");
        assert!(
            traces.iter().all(|t| t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit()) && *t != "0".repeat(32))
        );
        // A second logger (another endpoint of the process) draws from the same numbers.
        let other = logger();
        assert!((0..2000).map(|_| other.new_id()).all(|id| !ids.contains(&id)), "the same prefix, other numbers");
    }

    /// Four threads emit `lines` lines each (line `i` padded to `pad(i)` bytes); every line must
    /// arrive whole and once.
    fn emit_from_threads(sink: StderrSink, lines: usize, pad: fn(usize) -> usize) {
        let sink = Arc::new(sink);
        let writers: Vec<_> = (0..4)
            .map(|thread| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..lines {
                        sink.emit(format!(r#"{{"thread":{thread},"i":{i},"pad":"{}"}}"#, "x".repeat(pad(i))));
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
    }

    fn assert_whole(text: &str, expected: usize) {
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            let line: Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("a broken line: {line:.80}"));
            assert!(seen.insert((line["thread"].as_u64().unwrap(), line["i"].as_u64().unwrap())));
        }
        assert_eq!(seen.len(), expected);
    }

    #[test]
    fn lines_written_at_once_from_many_threads_stay_whole() {
        let path = std::env::temp_dir().join(format!("vercel-mcp-log-{}", std::process::id()));
        emit_from_threads(StderrSink::to(std::fs::File::create(&path).unwrap()), 2000, |i| 100 + i % 400);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_whole(&text, 8000);
    }

    #[test]
    fn a_line_longer_than_one_write_is_not_split_by_others() {
        use std::io::Read;
        // A socket, like a pipe, takes a long write in pieces as its buffer drains.
        let (writer, mut reader) = std::os::unix::net::UnixStream::pair().unwrap();
        let collector = std::thread::spawn(move || {
            let mut text = String::new();
            reader.read_to_string(&mut text).unwrap();
            text
        });
        let sink = StderrSink::to(std::fs::File::from(std::os::fd::OwnedFd::from(writer)));
        emit_from_threads(sink, 200, |i| if i % 10 == 0 { 300_000 } else { 100 });
        assert_whole(&collector.join().unwrap(), 800);
    }

    /// Written at once by [`holding_runtime`]'s worker, whose next idle moment makes it hold lines.
    const WARM: &str = "warm 1\nwarm 2\n";

    /// A one-worker runtime set up as [`hold_lines_until_idle`] does, whose worker reports each
    /// time it goes idle whether it holds lines from then on; returned once it does.
    fn holding_runtime(sink: &StderrSink) -> (tokio::runtime::Runtime, std::sync::mpsc::Receiver<bool>) {
        let (went_idle, idle) = std::sync::mpsc::channel();
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        // The stop hook as set up for the local run; the park hook also reports.
        let runtime = hold_lines_until_idle(builder.worker_threads(1))
            .on_thread_park(move || {
                going_idle();
                let _ = went_idle.send(HELD_LINES.with(|held| held.borrow().holding));
            })
            .build()
            .unwrap();
        let sink = sink.clone();
        on_worker(&runtime, async move {
            sink.emit("warm 1".into());
            sink.emit("warm 2".into());
        });
        wait_until_idle(&idle, true);
        (runtime, idle)
    }

    /// Runs `work` on the runtime's worker and returns its output.
    fn on_worker<T: Send + 'static>(
        runtime: &tokio::runtime::Runtime,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        runtime.block_on(runtime.spawn(work)).unwrap()
    }

    fn wait_until_idle(idle: &std::sync::mpsc::Receiver<bool>, holding: bool) {
        while idle.recv_timeout(std::time::Duration::from_secs(10)).expect("the worker goes idle") != holding {}
    }

    /// A file the test's sink writes to, removed when the test ends (passing or not).
    struct LogFile(std::path::PathBuf);

    impl std::ops::Deref for LogFile {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for LogFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn log_file(name: &str) -> (LogFile, StderrSink) {
        let path = std::env::temp_dir().join(format!("vercel-mcp-{name}-{}", std::process::id()));
        let sink = StderrSink::to(std::fs::File::create(&path).unwrap());
        (LogFile(path), sink)
    }

    fn read(path: &std::path::Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn a_busy_worker_holds_its_lines_until_it_goes_idle_and_keeps_their_order() {
        let (path, sink) = log_file("held");
        let (runtime, idle) = holding_runtime(&sink);
        let long = format!("long{}", "x".repeat(5000));
        let (seen, expected) = (path.to_path_buf(), format!("{WARM}a\nb\n{long}\nc\n"));
        let (held, after_long, last_held) = on_worker(&runtime, async move {
            sink.emit("a".into());
            sink.emit("b".into());
            let held = read(&seen);
            // A line too long to be written whole goes at once, after the lines held before it.
            sink.emit(long);
            let after_long = read(&seen);
            sink.emit("c".into());
            (held, after_long, read(&seen))
        });
        assert_eq!(held, WARM, "lines are held while their worker runs");
        assert_eq!(after_long, expected.trim_end_matches("c\n"));
        assert_eq!(last_held, after_long, "held again after the long line");
        // The worker writes what it holds before it parks.
        while read(&path) != expected {
            idle.recv_timeout(std::time::Duration::from_secs(10)).expect("the worker goes idle again");
        }
    }

    #[test]
    fn a_worker_writes_its_lines_when_they_would_not_fit_in_one_write_and_when_it_stops() {
        let (path, sink) = log_file("full");
        let (runtime, _idle) = holding_runtime(&sink);
        let seen = path.to_path_buf();
        let line = |i: usize| format!("{i:04}{}", "y".repeat(95));
        let written = on_worker(&runtime, async move {
            (0..300).for_each(|i| sink.emit(line(i)));
            let written = read(&seen);
            sink.emit("last".into());
            written
        });
        // 300 lines of 100 bytes: whole lines went out in writes of at most 16 KiB, and the rest
        // is held.
        let written = written.strip_prefix(WARM).expect("the warm-up lines first");
        assert!(written.ends_with('\n') && written.len() % 100 == 0, "whole lines only");
        let per_write = HELD_MAX / 100 * 100;
        assert_eq!(written.len(), 30_000 / per_write * per_write, "as many lines as fit, a write at a time");
        runtime.shutdown_timeout(std::time::Duration::from_secs(10));
        let expected: String = (0..300).map(|i| format!("{}\n", line(i))).collect::<String>() + "last\n";
        assert_eq!(read(&path), format!("{WARM}{expected}"));
    }

    #[test]
    fn a_worker_that_logs_one_line_between_idle_moments_writes_it_at_once() {
        let (path, sink) = log_file("quiet");
        let (runtime, idle) = holding_runtime(&sink);
        let one = sink.clone();
        on_worker(&runtime, async move { one.emit("one".into()) });
        wait_until_idle(&idle, false);
        let seen = path.to_path_buf();
        let written = on_worker(&runtime, async move {
            sink.emit("two".into());
            read(&seen)
        });
        assert_eq!(written, format!("{WARM}one\ntwo\n"));
    }

    #[test]
    fn threads_that_are_not_holding_workers_write_each_line_at_once() {
        let (path, sink) = log_file("direct");
        let (runtime, _idle) = holding_runtime(&sink);
        let mut expected = WARM.to_owned();
        // The thread that blocks on the runtime, and one of its blocking pool: each logs lines
        // between waits, and every line is written when it is logged.
        runtime.block_on(async {
            for i in 0..3 {
                sink.emit(format!("block_on {i}"));
                expected += &format!("block_on {i}\n");
                assert_eq!(read(&path), expected);
                tokio::task::yield_now().await;
                tokio::spawn(async {}).await.unwrap();
            }
            let (sink, seen, before) = (sink.clone(), path.to_path_buf(), expected.clone());
            let written = tokio::task::spawn_blocking(move || {
                (0..3)
                    .map(|i| {
                        sink.emit(format!("blocking {i}"));
                        read(&seen)
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap();
            for (i, written) in written.into_iter().enumerate() {
                let lines: String = (0..=i).map(|n| format!("blocking {n}\n")).collect();
                assert_eq!(written, format!("{before}{lines}"));
            }
        });
    }

    #[test]
    fn lines_a_worker_logs_while_its_runtime_shuts_down_are_written() {
        /// Logs two lines when dropped: the runtime drops it on its worker as it shuts down.
        struct LogsWhenDropped(StderrSink);
        impl Drop for LogsWhenDropped {
            fn drop(&mut self) {
                self.0.emit("dropped 1".into());
                self.0.emit("dropped 2".into());
            }
        }
        let (path, sink) = log_file("shutdown");
        let (runtime, _idle) = holding_runtime(&sink);
        let guard = LogsWhenDropped(sink.clone());
        let (started, running) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            let _guard = guard;
            sink.emit("running 1".into());
            sink.emit("running 2".into());
            let _ = started.send(());
            std::future::pending::<()>().await;
        });
        running.recv_timeout(std::time::Duration::from_secs(10)).expect("the task runs");
        drop(runtime);
        assert_eq!(read(&path), format!("{WARM}running 1\nrunning 2\ndropped 1\ndropped 2\n"));
    }

    #[test]
    fn the_local_runs_runtime_holds_the_lines_of_a_busy_worker_and_writes_them_all() {
        let (path, sink) = log_file("local-runtime");
        let runtime = crate::local::runtime().unwrap();
        // A worker holds lines once it logged more than one between idle moments. Each round
        // gives the workers an idle moment (the round trip through this thread); a round whose
        // first line is not written at once shows a worker holding.
        let mut rounds = 0;
        let held = loop {
            rounds += 1;
            let (sink, seen) = (sink.clone(), path.to_path_buf());
            let held = on_worker(&runtime, async move {
                let before = read(&seen).len();
                sink.emit("one".into());
                let held = read(&seen).len() == before;
                sink.emit("two".into());
                held
            });
            if held || rounds == 1000 {
                break held;
            }
        };
        assert!(held, "no worker of the local run's runtime held a line in {rounds} rounds");
        drop(runtime);
        assert_eq!(read(&path), "one\ntwo\n".repeat(rounds), "every line written by the time it stopped");
    }

    #[test]
    fn a_panic_caught_inside_nested_handler_code_leaves_the_outer_code_quiet_and_the_thread_unmarked() {
        install_panic_hook();
        let outer = std::panic::catch_unwind(|| {
            in_handler(|| {
                let inner = std::panic::catch_unwind(|| in_handler(|| panic!("inner")));
                assert!(inner.is_err());
                assert!(take_panic_location().expect("recorded").ends_with(": inner"));
                panic!("outer")
            })
        });
        assert!(outer.is_err());
        let recorded = take_panic_location().expect("the second panic was recorded quietly too");
        assert!(recorded.ends_with(": outer"), "{recorded}");
        assert!(!IN_HANDLER.with(|flag| flag.get()), "the thread is not left marked");
    }

    #[test]
    fn a_json_digest_equals_the_digest_of_its_text() {
        let logger = logger();
        let value = json!({"message": "héllo \"there\"", "n": [1, 2.5, null], "nested": {"a": true}});
        assert_eq!(logger.digest_json("arguments", &value), logger.digest("arguments", value.to_string().as_bytes()));
        // Longer than the gathering buffer: in many small writes, and in one write longer than it.
        for value in [json!((0..200).collect::<Vec<_>>()), json!({"a": "x".repeat(255), "b": "y".repeat(700)})] {
            assert_eq!(
                logger.digest_json("arguments", &value),
                logger.digest("arguments", value.to_string().as_bytes())
            );
        }
        assert_ne!(logger.digest_json("arguments", &value), logger.digest_json("other", &value), "kinds separate");
        assert_eq!(logger.digest("principal", b"sub:a").len(), 16);
    }

    #[test]
    fn a_principal_digest_is_the_digest_of_its_id_the_anonymous_one_kept() {
        let logger = logger();
        for id in ["anonymous", "sub:a", "anonymous "] {
            assert_eq!(logger.principal_digest(id), logger.digest("principal", id.as_bytes()), "{id:?}");
        }
    }

    #[test]
    fn digests_are_siphash_2_4_and_unchanged_by_the_move_off_the_std_hasher() {
        let logger = logger();
        #[allow(deprecated)]
        let mut reference = std::hash::SipHasher::new_with_keys(logger.digest_key.0, logger.digest_key.1);
        reference.write(b"principal");
        reference.write_u8(0xff);
        reference.write(b"sub:a");
        assert_eq!(
            logger.digest("principal", b"sub:a").as_str(),
            crate::state::seal::hex(&reference.finish().to_be_bytes())
        );
    }

    #[test]
    fn log_times_come_from_the_injected_clock() {
        let clock = Arc::new(ManualClock::new(1_796_083_200_000)); // 2026-12-01T00:00:00Z
        let (sink, logger) = logger_to_memory(clock.clone());
        logger.event("info", "tick", json!({}));
        clock.advance_ms(1_500);
        RequestRecord::start(&logger).finish(&logger, 200, crate::body::ResponseOutcome::Ok, false);
        let times: Vec<Value> = sink.lines().iter().map(|line| line["ts"].clone()).collect();
        assert_eq!(times, [json!("2026-12-01T00:00:00.000Z"), json!("2026-12-01T00:00:01.500Z")]);
    }

    /// The method and the name are the client's: whatever they hold, the line is one JSON object
    /// with them as serde_json writes them, and text with nothing to escape is written as it is.
    #[test]
    fn a_request_line_writes_the_clients_text_as_serde_json_does() {
        let (sink, logger) = logger_to_memory(Arc::new(ManualClock::new(1_796_083_200_000)));
        // Each kind of character serde_json escapes, alone in its text, and text it leaves alone.
        let texts = ["tools/call", "a \"quote\"", "back\\slash", "tab\t", "new\nline", "nul\u{0}", "unit\u{1f}"];
        for method in texts.into_iter().chain(["del\u{7f} é ☃ 𝄞", "", " "]) {
            for name in [None, Some("echo"), Some("a\"b"), Some("c\u{1}")] {
                let mut record = RequestRecord::start(&logger);
                record.method = Some(std::borrow::Cow::Owned(method.to_owned()));
                record.name = name.map(str::to_owned);
                record.principal = Some(logger.principal_digest("sub:a"));
                record.finish(&logger, 200, crate::body::ResponseOutcome::Ok, false);
                let raw = sink.raw().pop().unwrap();
                let written = |value: Option<&str>| serde_json::to_string(&value).unwrap();
                let expected = format!(r#","method":{},"name":{},"principal":"#, written(Some(method)), written(name));
                assert!(raw.contains(&expected), "{raw}\nshould contain {expected}");
                let line: Value = serde_json::from_str(&raw).unwrap();
                assert_eq!((line["method"].as_str(), line["name"].as_str()), (Some(method), name), "{raw}");
            }
        }
    }

    #[test]
    fn failures_only_skips_the_lines_of_requests_that_succeeded_and_nothing_else() {
        use crate::body::ResponseOutcome;
        let (sink, every) = logger_to_memory(Arc::new(ManualClock::new(1_796_083_200_000)));
        let failures = every.clone().with_request_lines(RequestLines::Failures);
        let finish = |logger: &Logger, status: u16, outcome: ResponseOutcome, stream: bool| {
            RequestRecord::start(logger).finish(logger, status, outcome, stream);
            sink.lines().len()
        };
        assert_eq!(finish(&every, 200, ResponseOutcome::Ok, false), 1, "by default every request has its line");
        assert_eq!(finish(&every, 202, ResponseOutcome::Ok, false), 2);
        assert_eq!(finish(&failures, 200, ResponseOutcome::Ok, false), 2, "a success has none");
        assert_eq!(finish(&failures, 202, ResponseOutcome::Ok, false), 2, "nor an accepted notification");
        let failed = [
            (200, ResponseOutcome::ToolError, false),
            (200, ResponseOutcome::ProtocolError(Some(-32602)), false),
            (400, ResponseOutcome::ProtocolError(Some(-32600)), false),
            (401, ResponseOutcome::AuthFailure, false),
            (405, ResponseOutcome::Ok, false),
            (500, ResponseOutcome::ProtocolError(Some(-32603)), false),
            (200, ResponseOutcome::Ok, true),
        ];
        for (at, (status, outcome, stream)) in failed.into_iter().enumerate() {
            assert_eq!(finish(&failures, status, outcome, stream), 3 + at, "{status} {outcome:?} stream {stream}");
        }
        let statuses: Vec<Value> = sink.lines()[2..].iter().map(|line| line["status"].clone()).collect();
        assert_eq!(statuses, [json!(200), json!(200), json!(400), json!(401), json!(405), json!(500), json!(200)]);
        failures.event("info", "job.submit", json!({}));
        assert_eq!(sink.lines().last().unwrap()["event"], "job.submit", "event lines are not request lines");
    }

    #[test]
    fn an_event_line_is_one_json_object_whose_own_members_come_first_and_once() {
        let (sink, logger) = logger_to_memory(Arc::new(ManualClock::new(1_796_083_200_000)));
        let fields = json!({ "level": "debug", "event": "forged", "ts": 0, "job": "a\"b\n", "count": 3, "none": null });
        logger.event("warn", "job.\"odd\"", fields);
        let raw = sink.raw().remove(0);
        assert!(raw.starts_with(r#"{"ts":"2026-12-01T00:00:00.000Z","level":"warn","event":"job.\"odd\"","#), "{raw}");
        assert_eq!(raw.matches("\"level\"").count(), 1, "{raw}");
        assert_eq!(raw.matches("\"event\"").count(), 1, "{raw}");
        assert_eq!(raw.matches("\"ts\"").count(), 1, "{raw}");
        let line: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(
            line,
            json!({ "ts": "2026-12-01T00:00:00.000Z", "level": "warn", "event": "job.\"odd\"", "job": "a\"b\n",
                    "count": 3, "none": null })
        );
        logger.event("info", "bare", json!({}));
        assert_eq!(sink.raw()[1], r#"{"ts":"2026-12-01T00:00:00.000Z","level":"info","event":"bare"}"#);
    }

    #[test]
    fn a_typed_event_line_reads_as_the_same_line_built_from_a_value() {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields<'a> {
            job: &'a str,
            completed_steps: u32,
            none: Option<u32>,
        }
        #[derive(serde::Serialize)]
        struct NoFields {}
        let (sink, logger) = logger_to_memory(Arc::new(ManualClock::new(1_796_083_200_000)));
        logger.event_of("warn", "job.\"odd\"", &Fields { job: "a\"b\n{}", completed_steps: 3, none: None });
        logger.event("warn", "job.\"odd\"", json!({ "job": "a\"b\n{}", "completedSteps": 3, "none": null }));
        logger.event_of("info", "bare", &NoFields {});
        logger.event_of("info", "not an object", &(1, 2));
        let raw = sink.raw();
        assert_eq!(
            raw[0],
            r#"{"ts":"2026-12-01T00:00:00.000Z","level":"warn","event":"job.\"odd\"","job":"a\"b\n{}","completedSteps":3,"none":null}"#
        );
        let (typed, built): (Value, Value) =
            (serde_json::from_str(&raw[0]).unwrap(), serde_json::from_str(&raw[1]).unwrap());
        assert_eq!(typed, built);
        assert_eq!(raw[2], r#"{"ts":"2026-12-01T00:00:00.000Z","level":"info","event":"bare"}"#);
        assert_eq!(raw[3], r#"{"ts":"2026-12-01T00:00:00.000Z","level":"info","event":"not an object"}"#);
    }

    #[test]
    fn ids_are_hex_of_the_expected_length_and_distinct() {
        let logger = logger();
        let (a, b) = (logger.new_id(), logger.new_id());
        assert_ne!(a, b);
        let trace = logger.new_trace_id();
        for (id, len) in [(&a, 16), (&b, 16), (&trace, 32)] {
            assert_eq!(id.len(), len, "{id}");
            assert!(id.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{id}");
        }
        assert_eq!(
            crate::telemetry::trace_id_from(&format!("00-{trace}-00f067aa0ba902b7-01")),
            Some(trace.as_str()),
            "a valid trace id"
        );
    }
}
