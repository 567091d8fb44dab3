//! The local run: one process that routes every path of the project to the same handlers the
//! Vercel Functions call, on 127.0.0.1 only.
//!
//! Each connection is served by hyper with `TCP_NODELAY` (SSE frames must not wait on delayed
//! ACKs). Routing is a plain match on the path: the project has a handful of routes and they
//! mirror `api/`. The in-process queue delivers to the consumer route's handler exactly as
//! Vercel Queues would deliver to `api/queues/process-job.rs`.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use tokio::net::TcpListener;

use crate::compose::Parts;
use crate::jobs::{Consumer, LocalQueue, RedisStreamQueue, Sweep};
use crate::settings::ConnectionLimits;
use crate::transport::{self, App, Body};

/// The routes of the project, each backed by what its Vercel Function would build.
#[derive(Clone)]
pub struct Routes {
    mcp: Arc<App>,
    examples: Arc<std::collections::HashMap<&'static str, Arc<App>>>,
    consumer: Option<Arc<Consumer>>,
    sweep: Option<Arc<Sweep>>,
    local_queue: Option<LocalQueue>,
    stream_queue: Option<Arc<RedisStreamQueue>>,
    /// The stream worker, once started: shutting down waits for it.
    workers: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    limits: ConnectionLimits,
    /// Connections being served, each told when to close: a drain closes them all and waits
    /// for none to be left.
    connections: Arc<Connections>,
}

/// How long, once asked to stop, the local run waits for what is in flight before it goes:
/// requests being answered, listen streams sending their result, task rounds finishing (or being
/// recorded as failed, `tasks::ROUND_STOP_GRACE`), the job worker handing back what it holds.
/// The whole stop, the last export of spans included, keeps within [`STOP_WITHIN`].
pub const DRAIN_GRACE: std::time::Duration = std::time::Duration::from_secs(7);

/// The longest the last export of spans may take once the drain is over.
const FINAL_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a whole stop may take, from the signal to the exit: the drain ([`DRAIN_GRACE`]), then
/// the job worker's hand-back (begun with the drain, and waited for until a second is left), then
/// the last export of spans ([`FINAL_FLUSH`]). A second under the 10 s a container runtime gives
/// before it kills.
pub const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(9);

impl Routes {
    /// Builds every route from one configuration, and connects the in-process queue (if any)
    /// to the consumer route.
    pub fn new(parts: &Parts) -> Self {
        Self::with_mcp(crate::mcp_app(parts))
            .with_jobs(parts)
            .with_examples(parts)
            .with_limits(parts.settings.connection_limits)
    }

    /// Sets the header and body timeouts and the connection cap.
    pub fn with_limits(mut self, limits: ConnectionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Adds `/api/examples/<name>` for every example served on its own.
    pub fn with_examples(mut self, parts: &Parts) -> Self {
        let examples = crate::catalogue::EXAMPLES
            .iter()
            .filter_map(|e| crate::example_app(e.name, parts).map(|app| (e.name, app)))
            .collect();
        self.examples = Arc::new(examples);
        self
    }

    /// Only the MCP route, with an explicit app (tests and the conformance fixture).
    pub fn with_mcp(mcp: Arc<App>) -> Self {
        Self {
            mcp,
            examples: Arc::default(),
            consumer: None,
            sweep: None,
            local_queue: None,
            stream_queue: None,
            workers: Arc::default(),
            limits: ConnectionLimits::default(),
            connections: Arc::default(),
        }
    }

    /// Adds the consumer and sweep routes of `parts`'s job backend.
    pub fn with_jobs(mut self, parts: &Parts) -> Self {
        let consumer = Arc::new(crate::consumer(parts));
        if let Some(queue) = &parts.jobs.local_queue {
            queue.connect_consumer(consumer.clone());
            self.local_queue = Some(queue.clone());
        }
        self.stream_queue = parts.jobs.stream_queue.clone();
        self.consumer = Some(consumer);
        self.sweep = Some(Arc::new(crate::sweep(parts)));
        self
    }

    /// Starts the queue's worker: the in-process queue's delivery loop, or this instance's
    /// reader of the Redis stream (the local run; tests drive the in-process queue by hand).
    pub fn start_background_work(&self) {
        if let Some(queue) = &self.local_queue {
            queue.spawn_worker();
        }
        if let (Some(stream), Some(consumer)) = (&self.stream_queue, &self.consumer) {
            let worker = tokio::spawn(stream.clone().work(consumer.clone()));
            self.workers.lock().expect("workers lock").push(worker);
        }
        // Spans are exported every second, or at once when a full batch is waiting; exports that
        // failed are logged, a line a minute at most.
        let telemetry = self.mcp.telemetry().clone();
        telemetry.flush_periodically(crate::telemetry::FLUSH_EVERY);
        if telemetry.is_on() {
            let logger = self.mcp.logger.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(crate::telemetry::FLUSH_EVERY).await;
                    crate::observe::report_export_failures(&logger, &telemetry);
                }
            });
        }
    }

    /// Every endpoint served.
    fn apps(&self) -> impl Iterator<Item = &Arc<App>> {
        std::iter::once(&self.mcp).chain(self.examples.values())
    }

    /// Begins stopping and waits, at most [`DRAIN_GRACE`], for what is in flight: each
    /// connection ends once its request is answered (an idle one at once), listen streams end
    /// with their result, and task rounds finish or are recorded as failed. The job worker is
    /// told to hand back what it holds ([`Routes::shut_down`] waits for it). The listener must be
    /// closed first, so that nothing new arrives. Returns whether everything ended in time.
    pub async fn drain(&self) -> bool {
        for app in self.apps() {
            app.stopping().begin();
        }
        self.connections.close_all();
        // The job worker starts handing back what it holds now (another instance resumes it at
        // once); `shut_down` waits for it.
        if let Some(stream) = &self.stream_queue {
            stream.shut_down();
        }
        // Polled: this runs once, at the end, and each of these ends by itself.
        let settled = async {
            let rounds = || self.apps().filter_map(|app| app.server().tasks.as_ref()).any(|tasks| tasks.running() > 0);
            while self.connections.open() > 0 || rounds() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(DRAIN_GRACE, settled).await.is_ok()
    }

    /// Stops taking deliveries: the stream worker hands back what it holds (another instance
    /// resumes it at once) and this waits for it until [`FINAL_FLUSH`] before `by` (a worker
    /// whose Redis does not answer is left; what it held is reclaimed by another instance once
    /// idle); then the last spans are exported ([`FINAL_FLUSH`] at most).
    pub async fn shut_down(&self, by: tokio::time::Instant) {
        if let Some(stream) = &self.stream_queue {
            stream.shut_down();
        }
        let workers = std::mem::take(&mut *self.workers.lock().expect("workers lock"));
        let handed_back = async {
            for worker in workers {
                let _ = worker.await;
            }
        };
        if tokio::time::timeout_at(by - FINAL_FLUSH, handed_back).await.is_err() {
            eprintln!("shutting down: the job worker did not finish handing back; leaving it");
        }
        let _ = tokio::time::timeout(FINAL_FLUSH, self.mcp.telemetry().flush()).await;
    }

    /// Serves one buffered request.
    pub async fn route(&self, request: Request<Bytes>) -> Response<Body> {
        match (request.uri().path(), &self.consumer, &self.sweep) {
            ("/api/mcp" | "/api/mcp/", _, _) => transport::handle(&self.mcp, request).await,
            (crate::security::resource::METADATA_PATH | "/.well-known/oauth-protected-resource/api/mcp", _, _) => {
                transport::auth::metadata_response(self.mcp.auth(), request.method())
            }
            (path, _, _) if path.starts_with("/.well-known/oauth-protected-resource/api/examples/") => {
                let name = path.trim_start_matches("/.well-known/oauth-protected-resource/api/examples/");
                match self.examples.get(name.trim_end_matches('/')) {
                    Some(app) => transport::auth::metadata_response(app.auth(), request.method()),
                    None => transport::no_route(&self.mcp.logger, &self.mcp.origins, request.headers()),
                }
            }
            ("/api/queues/process-job", Some(consumer), _) => consumer.handle(request).await,
            (path, _, _) if path.starts_with("/api/examples/") => {
                match self.examples.get(path.trim_start_matches("/api/examples/").trim_end_matches('/')) {
                    Some(app) => transport::handle(app, request).await,
                    None => transport::no_route(&self.mcp.logger, &self.mcp.origins, request.headers()),
                }
            }
            ("/api/cron/sweep-jobs", _, Some(sweep)) => sweep.handle(request).await,
            _ => transport::no_route(&self.mcp.logger, &self.mcp.origins, request.headers()),
        }
    }

    async fn route_incoming(&self, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        // A path naming no example is a 404 without reading the body.
        let app = match parts.uri.path() {
            "/api/mcp" | "/api/mcp/" => Some(&self.mcp),
            path if path.starts_with("/api/examples/") => {
                match self.examples.get(path.trim_start_matches("/api/examples/").trim_end_matches('/')) {
                    Some(app) => Some(app),
                    None => return transport::no_route(&self.mcp.logger, &self.mcp.origins, &parts.headers),
                }
            }
            _ => None,
        };
        // Each route reads at most what its function reads on Vercel; a path nothing serves (a
        // 404 after the read) reads no more than the metadata document does.
        let limit = match parts.uri.path() {
            _ if app.is_some() => self.mcp.max_body_bytes(),
            "/api/queues/process-job" => crate::jobs::consumer::MAX_BODY_BYTES,
            "/api/cron/sweep-jobs" => crate::jobs::sweep::MAX_BODY_BYTES,
            _ => transport::auth::METADATA_MAX_BODY_BYTES,
        };
        let mut read = std::pin::pin!(transport::read_body(body, limit));
        // A body that trickles in holds a connection and a buffer: it has a deadline. Most bodies
        // have already arrived with their head, and those are read without arming a timer.
        let arrived = match std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
            Poll::Ready(read) => Some(read),
            Poll::Pending => None,
        };
        // When the wait began, for a refusal's line (read only if there was a wait).
        let mut waited_since = None;
        // What the head decided, when the body was waited for.
        let mut screened = None;
        let read = match arrived {
            Some(read) => read,
            None => {
                let since = *waited_since.insert(std::time::Instant::now());
                // Before waiting for a body, an MCP route decides what the head alone decides
                // (Origin, method, credential, media type): a caller who may not call is answered
                // at once, and the server neither waits for nor holds its body. (A body that came
                // with its head is in hand already; screening it first would cost every request.)
                // Boxed: only requests that wait pay for its future.
                if let Some(app) = app {
                    let head = Box::pin(transport::screen_head(app, &parts)).await;
                    if !head.needs_body() {
                        return transport::handle_screened(Request::from_parts(parts, Bytes::new()), head).await;
                    }
                    screened = Some(head);
                }
                match tokio::time::timeout(self.limits.body_timeout, read).await {
                    Ok(read) => read,
                    Err(_) => {
                        return transport::refused(
                            &self.mcp.logger,
                            &self.mcp.origins,
                            &parts.headers,
                            since,
                            request_timeout(),
                        );
                    }
                }
            }
        };
        match read {
            Ok(bytes) => match screened {
                Some(head) => transport::handle_screened(Request::from_parts(parts, bytes), head).await,
                None => self.route(Request::from_parts(parts, bytes)).await,
            },
            Err(refusal) => {
                let arrived = waited_since.unwrap_or_else(std::time::Instant::now);
                transport::refused(&self.mcp.logger, &self.mcp.origins, &parts.headers, arrived, refusal)
            }
        }
    }
}

fn request_timeout() -> Response<Body> {
    let mut response = Response::new(Body::full(Bytes::from_static(b"Request Timeout: the body took too long")));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

/// The runtime the local run serves on: tokio's multi-threaded one, whose workers hold their log
/// lines until they go idle (`observe::hold_lines_until_idle`) instead of writing one per request.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    crate::observe::hold_lines_until_idle(builder.enable_all()).build()
}

/// `PORT`, defaulting to 3000 (set to nothing, as `.env.example` lists it, is unset); anything
/// but a port number is an error, not a silent default.
pub fn port_from_env() -> std::io::Result<u16> {
    port_from(std::env::var("PORT").ok().as_deref())
}

fn port_from(raw: Option<&str>) -> std::io::Result<u16> {
    match raw.map(str::trim).filter(|raw| !raw.is_empty()) {
        None => Ok(3000),
        Some(raw) => raw.parse().map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "PORT must be a port number from 0 to 65535")
        }),
    }
}

/// Binds 127.0.0.1:`port` (0 picks a free port) and serves until SIGTERM or Ctrl-C. Then it
/// stops accepting, drains what is in flight ([`Routes::drain`]), shuts the job worker down
/// ([`Routes::shut_down`]) and returns.
pub async fn serve(routes: Routes, port: u16) -> std::io::Result<()> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    let addr = listener.local_addr()?;
    println!("MCP server listening on http://{addr}/api/mcp");
    tokio::select! {
        served = serve_listener(routes.clone(), listener) => served,
        () = termination() => {
            // The accept loop, and the listener with it, went when this arm was chosen.
            let by = tokio::time::Instant::now() + STOP_WITHIN;
            eprintln!("shutting down: finishing requests, streams and task rounds in flight; handing back job deliveries");
            if !routes.drain().await {
                eprintln!("shutting down: {} s passed; cutting what is left", DRAIN_GRACE.as_secs());
            }
            routes.shut_down(by).await;
            Ok(())
        }
    }
}

/// Resolves on SIGTERM (a container stop, a deploy) or SIGINT (Ctrl-C).
async fn termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Serves on an already bound listener (tests bind port 0 and read the address first).
///
/// Slow and numerous clients are bounded: a request head must arrive within the header timeout
/// (from the connection's start, or the end of the previous response on it), a body within the body
/// timeout (else 408), a streamed chunk must be taken within the header timeout too (a client
/// that stops reading a stream does not hold it, and the work behind it, past its own limits),
/// as must each part of an answer that filled the socket (a slow reader is served as long as it
/// keeps reading; one that stops is cut), and at most `max_connections` connections are served at once; the next
/// one is accepted only when one of them ends, so the rest wait in the kernel's backlog instead
/// of costing a task and buffers each.
pub async fn serve_listener(routes: Routes, listener: TcpListener) -> std::io::Result<()> {
    let connections = Arc::new(tokio::sync::Semaphore::new(routes.limits.max_connections));
    // Failed accepts since the last `accept.failed` line, and when that was: one line a second
    // at most while the descriptor table stays full.
    let (mut unlogged_failures, mut last_logged) = (0u64, None::<std::time::Instant>);
    loop {
        let permit = connections.clone().acquire_owned().await.expect("the semaphore is never closed");
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors (the connection cap can be above the process's limit),
                // or a connection reset before it was taken: neither ends the server. The pause
                // keeps a full descriptor table from being spun on while connections close.
                #[derive(serde::Serialize)]
                struct AcceptFields {
                    error: String,
                    times: u64,
                }
                unlogged_failures += 1;
                if last_logged.is_none_or(|at| at.elapsed() >= ACCEPT_LOG_EVERY) {
                    let fields = AcceptFields { error: error.to_string(), times: unlogged_failures };
                    routes.mcp.logger.event_of("warn", "accept.failed", &fields);
                    (unlogged_failures, last_logged) = (0, Some(std::time::Instant::now()));
                }
                drop(permit);
                tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let routes = routes.clone();
        // Counted before its task runs: a drain that begins meanwhile waits for it, and closes it.
        let open = routes.connections.open_one();
        tokio::spawn(async move {
            let _permit = permit;
            let mut open = open;
            let activity = Arc::new(Activity::new());
            // Each request borrows the connection's routes: cloning them (an `Arc` count each)
            // per request would move counters shared by every connection between the cores.
            let (routes, on_connection) = (&routes, &activity);
            let service = hyper::service::service_fn(move |request| {
                async move {
                    // Busy from the first poll, not from the call: hyper calls the service for a
                    // pipelined request as soon as its head is read, but polls it only once the
                    // response before it has been written out. A client that pipelines requests
                    // and stops reading would otherwise keep the connection busy, out of reach of
                    // the idle timeout, for as long as it liked.
                    on_connection.busy();
                    let response = transport::answer_panics(&routes.mcp.logger, routes.route_incoming(request)).await;
                    let activity = Arc::clone(on_connection);
                    Ok::<_, std::convert::Infallible>(response.map(|body| WaitsOnTheClient { body, activity }))
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                // `Activity` keeps this timeout (hyper's would need a timer, and then default to 30 s).
                .header_read_timeout(None)
                .serve_connection(
                    TokioIo::new(Socket { stream, activity: Arc::clone(&activity), full: false }),
                    service,
                );
            tokio::pin!(connection);
            let idle = activity.idle_for(routes.limits.header_timeout);
            tokio::pin!(idle);
            tokio::select! {
                // The connection first: a head that has just arrived is read, and marks the
                // connection busy, before the deadline is looked at.
                biased;
                _ = connection.as_mut() => return,
                // Dropping the connection closes it, as hyper's own header timeout would.
                () = idle.as_mut() => return,
                // Its own channel, polled at every wake of the connection: outside tokio's
                // cooperative budget, which the connection's own reads and writes spend.
                _ = tokio::task::unconstrained(&mut open.closing) => {}
            }
            // Stopping: the request being answered is finished (a listen stream ends with its
            // result), then the connection closes; an idle one closes at once.
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                biased;
                _ = connection.as_mut() => {}
                () = idle.as_mut() => {}
            }
        });
    }
}

/// The connections being served, each with the sending half of the channel that tells it to
/// close. A lock per connection opened and closed, none per request.
#[derive(Default)]
struct Connections(std::sync::Mutex<ConnectionsState>);

#[derive(Default)]
struct ConnectionsState {
    next: u64,
    /// Open connections; the sender is gone once the connection was told to close.
    open: std::collections::HashMap<u64, Option<tokio::sync::oneshot::Sender<()>>>,
    /// Set by [`Connections::close_all`]: a connection opened after it is told at once.
    closing: bool,
}

impl Connections {
    /// Counts a new connection until the returned guard is dropped.
    fn open_one(self: &Arc<Self>) -> OpenConnection {
        let (tell, closing) = tokio::sync::oneshot::channel();
        let mut state = self.0.lock().expect("connections lock");
        let id = state.next;
        state.next += 1;
        // Closing already: the sender is dropped here, which the connection hears as "close".
        let tell = (!state.closing).then_some(tell);
        state.open.insert(id, tell);
        OpenConnection { connections: self.clone(), id, closing }
    }

    /// Tells every open connection, and every one opened from now on, to close.
    fn close_all(&self) {
        let mut state = self.0.lock().expect("connections lock");
        state.closing = true;
        for tell in state.open.values_mut().filter_map(Option::take) {
            let _ = tell.send(());
        }
    }

    fn open(&self) -> usize {
        self.0.lock().expect("connections lock").open.len()
    }
}

/// A connection counted in [`Connections`] for as long as it is served; `closing` resolves when
/// it should close.
struct OpenConnection {
    connections: Arc<Connections>,
    id: u64,
    closing: tokio::sync::oneshot::Receiver<()>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.connections.0.lock().expect("connections lock").open.remove(&self.id);
    }
}

/// Whether a connection is answering a request, or since when it has been waiting on the client
/// (for a request head, or to take a streamed chunk): the local run's header timeout. hyper's
/// own arms a timer for every request (an allocation, a clone of the runtime's handle, an entry
/// added to the timer wheel and removed again) for a deadline that a served client never meets;
/// here a connection has one timer, which fires at most once per timeout period and compares the
/// deadline with when the connection began waiting.
struct Activity {
    /// When the connection was accepted; `idle_since` counts from it.
    start: tokio::time::Instant,
    /// Nanoseconds from `start` to when the connection began waiting on the client (the end of
    /// the last response, a chunk of a stream handed to hyper, or 0: the connection's start), or
    /// `BUSY` while the server is working on a request.
    idle_since: AtomicU64,
}

const BUSY: u64 = u64::MAX;

/// How long the accept loop waits after a failed `accept` before it tries again.
const ACCEPT_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// At most one `accept.failed` line this often; it counts the failures since the last one.
const ACCEPT_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Activity {
    fn new() -> Self {
        Self { start: tokio::time::Instant::now(), idle_since: AtomicU64::new(0) }
    }

    /// A request head has arrived, or hyper asks a stream for more: no deadline runs until the
    /// connection waits on the client again.
    fn busy(&self) {
        self.idle_since.store(BUSY, Ordering::Relaxed);
    }

    /// The response is done, or a stream's chunk is with hyper: the next head, or hyper's next
    /// ask for more (once the client has taken enough), is due within the timeout from now.
    fn idle(&self) {
        let since = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(BUSY - 1);
        self.idle_since.store(since, Ordering::Relaxed);
    }

    /// The client took some of an answer that had filled the socket: it is reading, so a
    /// connection that was waiting on it starts waiting afresh (one that is busy stays busy).
    fn client_read(&self) {
        let since = self.idle_since.load(Ordering::Relaxed);
        if since != BUSY {
            let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(BUSY - 1);
            let _ = self.idle_since.compare_exchange(since, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Resolves once the connection has waited `timeout` on the client: for a request head,
    /// counted from its start or the end of its last response, or for room to write a stream's
    /// next chunk; never while the server is working on a request.
    async fn idle_for(&self, timeout: std::time::Duration) {
        let sleep = tokio::time::sleep_until(self.start + timeout);
        tokio::pin!(sleep);
        loop {
            sleep.as_mut().await;
            let now = tokio::time::Instant::now();
            let due = match self.idle_since.load(Ordering::Relaxed) {
                BUSY => now + timeout,
                since => self.start + std::time::Duration::from_nanos(since) + timeout,
            };
            if due <= now {
                return;
            }
            sleep.as_mut().reset(due);
        }
    }
}

/// A response body that tells its connection when it waits on the client: once it is done (hyper
/// drops it once it has taken the last byte, or the connection ends), and, for a stream, between
/// handing hyper a chunk and hyper asking for the next. hyper asks as soon as its buffer has room,
/// so a client that stops reading leaves the connection waiting, and the header timeout closes
/// it. A stream's body that is pending (its work has nothing to send yet) is not waiting on the
/// client: the work's own limits bound it.
struct WaitsOnTheClient {
    body: Body,
    activity: Arc<Activity>,
}

impl Drop for WaitsOnTheClient {
    fn drop(&mut self) {
        self.activity.idle();
    }
}

impl http_body::Body for WaitsOnTheClient {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        // A buffered body is one frame, then dropped: only a stream pays for the clock reads.
        if !self.body.is_stream() {
            return std::pin::Pin::new(&mut self.body).poll_frame(cx);
        }
        self.activity.busy();
        let frame = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(_)) = frame {
            self.activity.idle();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket, telling its [`Activity`] when a client that had let the socket fill
/// takes more. hyper drops a buffered answer's body as soon as it holds the bytes, which may be
/// long before the client has read them: without this, the header timeout would count from then,
/// and cut a large answer that a slow client was still reading steadily. Only a write that
/// follows a full socket reads the clock, so an answer that fits costs nothing.
struct Socket {
    stream: tokio::net::TcpStream,
    activity: Arc<Activity>,
    /// The last write found the socket full.
    full: bool,
}

impl Socket {
    fn note(&mut self, written: &Poll<std::io::Result<usize>>) {
        match written {
            Poll::Pending => self.full = true,
            Poll::Ready(Ok(n)) if *n > 0 && self.full => {
                self.full = false;
                self.activity.client_read();
            }
            Poll::Ready(_) => {}
        }
    }
}

impl tokio::io::AsyncRead for Socket {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Socket {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = std::pin::Pin::new(&mut self.stream).poll_write(cx, buf);
        self.note(&written);
        written
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.note(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_is_3000_when_unset_or_empty_and_an_error_when_not_a_port() {
        for unset in [None, Some(""), Some("  ")] {
            assert_eq!(port_from(unset).unwrap(), 3000, "{unset:?}");
        }
        assert_eq!(port_from(Some(" 8080 ")).unwrap(), 8080);
        for junk in ["http", "65536", "-1"] {
            assert!(port_from(Some(junk)).is_err(), "{junk}");
        }
    }

    /// A job worker that never finishes handing back (its Redis does not answer) is waited for
    /// until a flush's time before the stop's deadline, and no longer: the process still exits
    /// within [`STOP_WITHIN`].
    #[tokio::test(start_paused = true)]
    async fn a_worker_that_does_not_finish_is_left_at_the_stop_deadline() {
        let parts = crate::Parts::for_tests(Arc::new(crate::state::SystemClock));
        let app = Arc::new(App::new(crate::McpServer::new("stop-test", "1"), parts.endpoint()));
        let routes = Routes::with_mcp(app);
        routes.workers.lock().unwrap().push(tokio::spawn(std::future::pending::<()>()));
        let began = tokio::time::Instant::now();
        let stopped = tokio::time::timeout(STOP_WITHIN * 2, routes.shut_down(began + STOP_WITHIN)).await;
        assert!(stopped.is_ok(), "the stop waited for the worker for good");
        let took = began.elapsed();
        assert!(took >= STOP_WITHIN - FINAL_FLUSH, "the worker was waited for until then: {took:?}");
        assert!(took <= STOP_WITHIN, "and the stop kept its deadline: {took:?}");
    }
}
