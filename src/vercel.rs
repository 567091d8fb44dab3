//! The Vercel edge: adapts `vercel_runtime` requests to the library's handlers and back.
//!
//! This is the only module that names `vercel_runtime`; everything behind it works on
//! `http::Request<Bytes>`, so it is testable without the runtime.

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use std::future::Future;
use std::sync::Arc;
use vercel_runtime::{AppState, Error, Request, Response, ResponseBody};

use crate::compose::Parts;
use crate::observe::{LogSink, Logger};
use crate::security::AllowedOrigins;
use crate::state::background::{Keeper, Kept, KeptBody};
use crate::telemetry::Telemetry;
use crate::transport::{self, App, Body};

/// Runs a Vercel Function whose requests (bodies buffered up to `max_body`) go to `handler`.
/// With tracing on, spans are exported once everything the request started has ended, through
/// the runtime's `wait_until` (coalesced: one waiting at a time, a second later or at a full
/// batch): the response does not wait, and the instance is not frozen before they are sent.
///
/// A body the function refuses (over `max_body`, or broken) is answered here, as `origins`
/// decide (`transport::refused`), and has its request line written with `logger`.
pub async fn serve<H, F>(
    max_body: usize,
    origins: AllowedOrigins,
    telemetry: Telemetry,
    logger: Logger,
    handler: H,
) -> Result<(), Error>
where
    H: Fn(http::Request<Bytes>) -> F + Send + Sync + 'static,
    F: Future<Output = http::Response<Body>> + Send + 'static,
{
    // On Vercel the runtime talks to the platform over this socket: log lines sent through it
    // are tagged with their request, which is how Vercel's logs tie a line to its invocation.
    let bridged = std::env::var_os("VERCEL_IPC_PATH").is_some();
    // One reference count taken per request, for all four.
    let function = Arc::new((handler, telemetry, logger, origins));
    vercel_runtime::run(vercel_runtime::service_fn(move |request: Request, state: AppState| {
        let function = function.clone();
        async move {
            let (handler, telemetry, logger, origins) = &*function;
            let (parts, body) = request.into_parts();
            let served = transport::answer_panics(logger, async {
                match transport::read_body(body, max_body).await {
                    Ok(bytes) => handler(http::Request::from_parts(parts, bytes)).await,
                    // This edge has no body timeout of its own (the platform bounds the request):
                    // the line's latency counts from the refusal.
                    Err(refusal) => {
                        transport::refused(logger, origins, &parts.headers, std::time::Instant::now(), refusal)
                    }
                }
            });
            // Work the request leaves running (a task's round, a change's publish) holds the
            // invocation open until it ends, so the instance is not frozen in the middle of it.
            // A stream's work runs as its body is read, after the head: kept the same way, and
            // the body itself keeps the invocation open until it ends (`InvocationBody`).
            let keeper_state = state.clone();
            let (keeper, all_ended) = request_keeper(move |work| keeper_state.wait_until(work), telemetry.is_on());
            let served = crate::state::background::keeping(keeper.clone(), served);
            let sink: Option<Arc<dyn LogSink>> =
                bridged.then(|| Arc::new(RequestLog(state.log_context.clone())) as Arc<dyn LogSink>);
            let response = match &sink {
                Some(sink) => crate::observe::with_request_sink(sink.clone(), served).await,
                None => served.await,
            };
            // Spans are exported once everything the request started has ended (its stream's body
            // too, and a task round it left running), so none waits for another request's flush.
            if let Some(all_ended) = all_ended {
                let (telemetry, logger) = (telemetry.clone(), logger.clone());
                state.wait_until(async move {
                    let _ = all_ended.await;
                    if let Some(flush) = telemetry.flush_soon() {
                        flush.await;
                    }
                    crate::observe::report_export_failures(&logger, &telemetry);
                });
            }
            Ok::<Response<ResponseBody>, Error>(response.map(|body| {
                let body = body.map_err(|never| match never {});
                if body.get_ref().is_stream() {
                    // The runtime ends the invocation once the head is out and the work kept
                    // under it has settled; a body still being streamed is neither, so it is
                    // kept as work of its own until it is dropped (its end, or its client gone).
                    let (open, closed) = tokio::sync::oneshot::channel::<()>();
                    state.wait_until(async move {
                        let _ = closed.await;
                    });
                    ResponseBody(BoxBody::new(InvocationBody { body: KeptBody::new(body, keeper), sink, _open: open }))
                } else {
                    ResponseBody(BoxBody::new(body))
                }
            }))
        }
    }))
    .await
}

/// A streamed response's body as the edge hands it to the runtime: each frame is produced under
/// the request's keeper and, on the platform, with its log lines (a fault, an event the stream's
/// work writes) tagged with its invocation, as the head's are; and it holds its invocation open
/// for as long as it lives (`_open`, whose drop releases the work registered for it).
struct InvocationBody<B> {
    body: KeptBody<B>,
    sink: Option<Arc<dyn LogSink>>,
    _open: tokio::sync::oneshot::Sender<()>,
}

impl<B: http_body::Body + Unpin> http_body::Body for InvocationBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let body = std::pin::Pin::new(&mut this.body);
        match &this.sink {
            Some(sink) => crate::observe::in_request_sink(sink.clone(), || body.poll_frame(cx)),
            None => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// One request's keeper, handing what the request leaves running to `wait_until`; and, when
/// `tracing`, a signal that fires once the keeper is gone, which is when the response's body and
/// every piece of work kept under it have ended (each holds the keeper until then).
fn request_keeper(
    wait_until: impl Fn(Kept) + Send + Sync + 'static,
    tracing: bool,
) -> (Keeper, Option<tokio::sync::oneshot::Receiver<()>>) {
    if !tracing {
        return (Arc::new(wait_until), None);
    }
    // Never sent on: dropped with the last keeper, which wakes the receiver.
    let (alive, all_ended) = tokio::sync::oneshot::channel::<()>();
    let keeper: Keeper = Arc::new(move |work| {
        let _alive = &alive;
        wait_until(work)
    });
    (keeper, Some(all_ended))
}

/// Log lines of one request, sent through the runtime's request-tagged log channel at the level
/// the line names.
struct RequestLog(vercel_runtime::LogContext);

impl LogSink for RequestLog {
    fn emit(&self, line: String) {
        // Every line has a `"level":"…"` member; it decides the channel's level.
        let level = line.split("\"level\":\"").nth(1).and_then(|rest| rest.split('"').next());
        match level {
            Some("error") => self.0.error(&line),
            Some("warn") => self.0.warn(&line),
            _ => self.0.info(&line),
        }
    }
}

/// `api/mcp.rs`: the MCP endpoint.
pub async fn serve_mcp(parts: &Parts) -> Result<(), Error> {
    serve_app(parts, crate::mcp_app(parts)).await
}

/// Serves `app` as the MCP endpoint (the performance fixture brings its own catalogue).
pub async fn serve_app(parts: &Parts, app: Arc<App>) -> Result<(), Error> {
    run_jobs_in_process(parts);
    let max_body = app.max_body_bytes();
    serve(
        max_body,
        parts.settings.allowed_origins.clone(),
        parts.telemetry.clone(),
        app.logger.clone(),
        move |request| {
            let app = app.clone();
            async move { transport::handle(&app, request).await }
        },
    )
    .await
}

/// `api/examples.rs`: every example route from one function. `vercel.json` rewrites
/// `/api/examples/<name>` to `/api/examples?example=<name>`; the original path works too.
pub async fn serve_examples(parts: &Parts) -> Result<(), Error> {
    run_jobs_in_process(parts);
    let apps: Arc<std::collections::HashMap<&'static str, Arc<App>>> = Arc::new(
        crate::catalogue::EXAMPLES
            .iter()
            .filter_map(|e| crate::example_app(e.name, parts).map(|app| (e.name, app)))
            .collect(),
    );
    let max_body = apps.values().next().map_or(1 << 20, |app| app.max_body_bytes());
    let (logger, origins) = (Arc::new(parts.logger()), Arc::new(parts.settings.allowed_origins.clone()));
    serve(max_body, (*origins).clone(), parts.telemetry.clone(), (*logger).clone(), move |request| {
        let (apps, logger, origins) = (apps.clone(), logger.clone(), origins.clone());
        async move {
            let name = example_named(request.uri(), "/api/examples/").unwrap_or("").to_owned();
            match apps.get(name.as_str()) {
                Some(app) => transport::handle(app, request).await,
                None => transport::no_route(&logger, &origins, request.headers()),
            }
        }
    })
    .await
}

/// `api/queues/process-job.rs`: the queue consumer.
pub async fn serve_consumer(parts: &Parts) -> Result<(), Error> {
    let consumer = Arc::new(crate::consumer(parts));
    serve_platform_route(parts, crate::jobs::consumer::MAX_BODY_BYTES, move |request| {
        let consumer = consumer.clone();
        async move { consumer.handle(request).await }
    })
    .await
}

/// `api/cron/sweep-jobs.rs`: the cron sweep.
pub async fn serve_sweep(parts: &Parts) -> Result<(), Error> {
    let sweep = Arc::new(crate::sweep(parts));
    serve_platform_route(parts, crate::jobs::sweep::MAX_BODY_BYTES, move |request| {
        let sweep = sweep.clone();
        async move { sweep.handle(request).await }
    })
    .await
}

/// Serves a route the platform calls (the queue trigger, cron), with the process's origins,
/// telemetry and logger, reading bodies up to `max_body`.
async fn serve_platform_route<H, F>(parts: &Parts, max_body: usize, handler: H) -> Result<(), Error>
where
    H: Fn(http::Request<Bytes>) -> F + Send + Sync + 'static,
    F: Future<Output = http::Response<Body>> + Send + 'static,
{
    serve(max_body, parts.settings.allowed_origins.clone(), parts.telemetry.clone(), parts.logger(), handler).await
}

/// `api/oauth-protected-resource.rs`: the RFC 9728 metadata documents (every well-known path is
/// rewritten to it in `vercel.json`): `/api/mcp`'s, scopes of its tools included (so the endpoint
/// is composed once at start-up to read them), and each example route's, named as
/// [`example_named`] reads it. An example it does not know is 404.
pub async fn serve_metadata(parts: &Parts) -> Result<(), Error> {
    let mcp = Arc::new(crate::mcp_app(parts).auth().clone());
    // Each example route is its own protected resource, with its own document.
    let examples: Arc<std::collections::HashMap<&'static str, crate::security::Authenticator>> = Arc::new(
        crate::catalogue::EXAMPLES
            .iter()
            .filter_map(|e| crate::example_app(e.name, parts).map(|app| (e.name, app.auth().clone())))
            .collect(),
    );
    let (logger, origins) = (Arc::new(parts.logger()), Arc::new(parts.settings.allowed_origins.clone()));
    let max_body = transport::auth::METADATA_MAX_BODY_BYTES;
    serve(max_body, (*origins).clone(), parts.telemetry.clone(), (*logger).clone(), move |request| {
        let (mcp, examples, logger, origins) = (mcp.clone(), examples.clone(), logger.clone(), origins.clone());
        async move {
            let example = example_named(request.uri(), "/.well-known/oauth-protected-resource/api/examples/");
            match example {
                None => transport::auth::metadata_response(&mcp, request.method()),
                Some(name) => match examples.get(name) {
                    Some(auth) => transport::auth::metadata_response(auth, request.method()),
                    None => transport::no_route(&logger, &origins, request.headers()),
                },
            }
        }
    })
    .await
}

/// The example a request to a function that serves several names: `vercel.json`'s rewrite puts it
/// in the query (`?example=<name>`), and the platform may hand the function the original path
/// instead (`<under><name>`), so either names it. A path under `under` names it whatever the query
/// says, as the local run routes by path: `/api/examples/minimal?example=secure-tools` is served
/// by `minimal` on both, and a rule keyed on the path cannot be stepped around by a query.
fn example_named<'a>(uri: &'a http::Uri, under: &str) -> Option<&'a str> {
    let from_path = uri.path().strip_prefix(under).map(|name| name.trim_end_matches('/')).filter(|n| !n.is_empty());
    let from_query = || uri.query().and_then(|query| query.split('&').find_map(|pair| pair.strip_prefix("example=")));
    from_path.or_else(from_query)
}

/// Without Vercel Queues (the local posture), a function process runs the jobs it submits: its
/// in-process queue delivers to a consumer built from the same configuration, as the local run
/// does. Otherwise each message would wait for a consumer that never comes, every job would stay
/// pending, and the queue would grow with every submit.
fn run_jobs_in_process(parts: &Parts) {
    if let Some(queue) = &parts.jobs.local_queue {
        queue.connect_consumer(Arc::new(crate::consumer(parts)));
        queue.spawn_worker();
    }
    // Off Vercel with Redis, the process reads the stream, as every instance of the local run does.
    if let Some(stream) = &parts.jobs.stream_queue {
        tokio::spawn(stream.clone().work(Arc::new(crate::consumer(parts))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// With tracing on, the signal waits for the request's body and for the work it kept (each
    /// holds the keeper), then fires; with tracing off there is none.
    #[tokio::test]
    async fn spans_wait_for_everything_the_request_started() {
        let held: Arc<Mutex<Vec<Kept>>> = Arc::default();
        let into = held.clone();
        let (keeper, all_ended) = request_keeper(move |work| into.lock().unwrap().push(work), true);
        let mut all_ended = all_ended.expect("a signal when tracing");
        crate::state::background::keeping(keeper.clone(), async { crate::state::background::spawn(async {}) }).await;
        let body = keeper; // a stream's body holds the keeper as it is read
        use tokio::sync::oneshot::error::TryRecvError;
        assert_eq!(all_ended.try_recv(), Err(TryRecvError::Empty), "the body is being read");
        drop(body);
        assert_eq!(all_ended.try_recv(), Err(TryRecvError::Empty), "the kept work has not run");
        let work = held.lock().unwrap().pop().expect("the spawned work was kept");
        work.await;
        assert!(all_ended.await.is_err(), "fired: the sender is gone with the last keeper");
        assert!(request_keeper(|_| {}, false).1.is_none());
    }

    /// A streamed body's frames log to the request's sink (on the platform, its invocation's
    /// channel), not to the logger's own; and the body holds its invocation until it is dropped.
    #[tokio::test]
    async fn a_streamed_body_logs_to_its_request_and_holds_its_invocation() {
        use crate::observe::MemorySink;
        /// A body whose one frame logs a line.
        struct Logging(Logger);
        impl http_body::Body for Logging {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
                self.0.fault("store.fault", "get", "a line while the stream is read");
                std::task::Poll::Ready(None)
            }
        }
        let (own, requests) = (Arc::new(MemorySink::default()), Arc::new(MemorySink::default()));
        let sealer = crate::state::Sealer::new(vec![("k".into(), vec![1; 32])], Arc::new(crate::state::SystemClock));
        let logger = Logger::new(own.clone(), sealer.unwrap(), Arc::new(crate::state::SeededRandom::new(1)));
        let (open, mut closed) = tokio::sync::oneshot::channel::<()>();
        let mut body = InvocationBody {
            body: KeptBody::new(Logging(logger), Arc::new(|_| {})),
            sink: Some(requests.clone() as Arc<dyn LogSink>),
            _open: open,
        };
        assert!(body.frame().await.is_none());
        assert_eq!((requests.lines().len(), own.lines().len()), (1, 0), "the line went to the request's sink");
        assert!(closed.try_recv().is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Empty));
        drop(body);
        assert!(closed.await.is_err(), "released with the body");
    }
}
