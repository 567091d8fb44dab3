//! OpenTelemetry traces (the official API and SDK), exported over OTLP/HTTP (protobuf): a SERVER
//! span per MCP request, a child span per tool call, and a span per job delivery linked to the
//! request that submitted the job.
//!
//! Off unless an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SDK_DISABLED=true` turns it off again). Off, a
//! [`Telemetry`] is an empty handle and every span operation is a branch on `None`.
//!
//! Finished spans wait in a bounded in-memory queue; [`Telemetry::flush`] exports them as one
//! batch. On Vercel the edge registers a flush after a response through the runtime's
//! `wait_until` (one at a time, a second later: [`Telemetry::flush_soon`]), so the response never
//! waits and the instance is not frozen before the batch is sent; the local run flushes every
//! second. Either exports at once when 1024 spans are waiting. The batch is written as OTLP
//! protobuf straight from the SDK's span data (`otlp.rs`) and sent with the crate's own outbound
//! client (rustls with ring), so no second HTTP stack is linked.
//!
//! Privacy: attributes carry the method, the tool or resource name, the JSON-RPC id and error
//! code, the outcome and the protocol version; never arguments, tokens, handles or
//! `requestState`.

mod metrics;
mod otlp;

pub use metrics::{JOB_DELIVERIES, JOBS_SUBMITTED, OPERATION_DURATION, QUEUE_LAG, Series, TOOL_DURATION};
/// The kind a handler gives its own span ([`SpanHandle::child`]).
pub use opentelemetry::trace::SpanKind;

use opentelemetry::trace::{
    Link, SpanContext, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanProcessor};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Finished spans held at most; past it (exports not keeping up), spans are dropped and counted.
const MAX_QUEUED_SPANS: usize = 4096;

/// A batch this large is exported at once rather than at the next tick, so that a busy instance
/// exports every span it records (as the SDK's batch processor does at its batch size).
const EXPORT_BATCH: usize = 1024;

/// How long spans may wait for their export.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What `OTEL_*` configure.
#[derive(Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where traces go: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// followed by `/v1/traces`.
    pub traces_endpoint: String,
    /// `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,…`, values percent-decoded): often a credential.
    pub headers: Vec<(String, String)>,
    /// `OTEL_SERVICE_NAME` (`vercel-mcp` by default).
    pub service_name: String,
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
    pub sampler: SamplerChoice,
    /// Where metrics go: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// followed by `/v1/metrics`; `None` with `OTEL_METRICS_EXPORTER=none` or only a traces
    /// endpoint.
    pub metrics_endpoint: Option<String>,
}

impl std::fmt::Debug for TelemetrySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are credentials; their names are not.
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TelemetrySettings")
            .field("traces_endpoint", &self.traces_endpoint)
            .field("headers", &names)
            .field("service_name", &self.service_name)
            .field("sampler", &self.sampler)
            .field("metrics_endpoint", &self.metrics_endpoint)
            .finish()
    }
}

/// The samplers of the OpenTelemetry environment specification.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SamplerChoice {
    /// `always_on`.
    AlwaysOn,
    /// `always_off`.
    AlwaysOff,
    /// `traceidratio` with its ratio.
    Ratio(f64),
    /// `parentbased_always_on` (the default): follow the caller's decision, else sample.
    ParentBasedAlwaysOn,
    /// `parentbased_always_off`.
    ParentBasedAlwaysOff,
    /// `parentbased_traceidratio` with its ratio.
    ParentBasedRatio(f64),
}

impl SamplerChoice {
    fn sampler(self) -> Sampler {
        match self {
            Self::AlwaysOn => Sampler::AlwaysOn,
            Self::AlwaysOff => Sampler::AlwaysOff,
            Self::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
            Self::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            Self::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            Self::ParentBasedRatio(ratio) => Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))),
        }
    }
}

/// Reads the `OTEL_*` variables through `var`: `Ok(None)` when tracing is off.
pub fn settings_from(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<TelemetrySettings>, Vec<String>> {
    let mut problems = Vec::new();
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let endpoint = match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        (Some(traces), _) => traces.trim().to_owned(),
        (None, Some(base)) => format!("{}/v1/traces", base.trim().trim_end_matches('/')),
        (None, None) => return Ok(None),
    };
    if !url::Url::parse(&endpoint).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some()) {
        problems.push("OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL".to_owned());
    }
    let mut headers = Vec::new();
    for pair in var("OTEL_EXPORTER_OTLP_HEADERS").unwrap_or_default().split(',').filter(|p| !p.trim().is_empty()) {
        let decoded = pair
            .split_once('=')
            .map(|(name, value)| (name.trim().to_owned(), percent_decode(value.trim())))
            .filter(|(name, value)| {
                http::HeaderName::from_bytes(name.as_bytes()).is_ok() && http::HeaderValue::from_str(value).is_ok()
            });
        match decoded {
            Some(header) => headers.push(header),
            // Never the value: it is usually a credential.
            None => problems.push("OTEL_EXPORTER_OTLP_HEADERS must be name=value pairs separated by commas".into()),
        }
    }
    let ratio = || -> Result<f64, String> {
        match var("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(raw) => match raw.trim().parse::<f64>() {
                Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
                _ => Err("OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1".to_owned()),
            },
        }
    };
    let sampler = match var("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
        None | Some("parentbased_always_on") => Ok(SamplerChoice::ParentBasedAlwaysOn),
        Some("always_on") => Ok(SamplerChoice::AlwaysOn),
        Some("always_off") => Ok(SamplerChoice::AlwaysOff),
        Some("parentbased_always_off") => Ok(SamplerChoice::ParentBasedAlwaysOff),
        Some("traceidratio") => ratio().map(SamplerChoice::Ratio),
        Some("parentbased_traceidratio") => ratio().map(SamplerChoice::ParentBasedRatio),
        Some(_) => Err("OTEL_TRACES_SAMPLER must be always_on, always_off, traceidratio, parentbased_always_on, \
                        parentbased_always_off or parentbased_traceidratio"
            .to_owned()),
    };
    let sampler = sampler.unwrap_or_else(|problem| {
        problems.push(problem);
        SamplerChoice::ParentBasedAlwaysOn
    });
    if !problems.is_empty() {
        return Err(problems);
    }
    let service_name = var("OTEL_SERVICE_NAME").filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "vercel-mcp".into());
    let metrics_off = var("OTEL_METRICS_EXPORTER").is_some_and(|v| v.trim() == "none");
    let metrics_endpoint = match (var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        _ if metrics_off => None,
        (Some(metrics), _) => Some(metrics.trim().to_owned()),
        (None, Some(base)) => Some(format!("{}/v1/metrics", base.trim().trim_end_matches('/'))),
        (None, None) => None,
    };
    if metrics_endpoint.as_deref().is_some_and(|e| {
        !url::Url::parse(e).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
    }) {
        return Err(vec!["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT must be an http(s) URL".to_owned()]);
    }
    Ok(Some(TelemetrySettings { traces_endpoint: endpoint, headers, service_name, sampler, metrics_endpoint }))
}

fn percent_decode(value: &str) -> String {
    url::form_urlencoded::parse(format!("v={}", value.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// The process's tracer, or nothing when tracing is off. Cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry(Option<Arc<Inner>>);

struct Inner {
    /// Counters and histograms since the process started.
    metrics: metrics::Registry,
    /// Where spans and metrics go, and the headers every export carries.
    traces_endpoint: String,
    metrics_endpoint: Option<String>,
    headers: Vec<(String, String)>,
    service_name: String,
    /// What every span batch says produced it (`service.name`).
    resource: Resource,
    started_ns: u64,
    /// A coalesced flush is waiting to run ([`Telemetry::flush_soon`]).
    flush_pending: std::sync::atomic::AtomicBool,
    tracer: SdkTracer,
    // Kept so the tracer stays connected to its processor.
    _provider: SdkTracerProvider,
    queue: Arc<SpanQueue>,
}

impl Inner {
    /// Sends one OTLP/HTTP protobuf export, with the configured headers; the answer is not read.
    async fn post(&self, endpoint: &str, body: Vec<u8>) {
        let mut request = http::Request::post(endpoint).header(http::header::CONTENT_TYPE, "application/x-protobuf");
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Ok(request) = request.body(http_body_util::Full::new(bytes::Bytes::from(body))) {
            let _ = crate::outbound::send(request, Duration::from_secs(10)).await;
        }
    }
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("on", &self.is_on()).finish()
    }
}

impl Telemetry {
    /// Tracing off: every span is a no-op.
    pub fn off() -> Self {
        Self(None)
    }

    /// A tracer exporting to `settings.traces_endpoint`. Connects nothing until the first flush.
    pub fn new(settings: &TelemetrySettings) -> Self {
        let resource = Resource::builder().with_service_name(settings.service_name.clone()).build();
        let queue = Arc::new(SpanQueue::default());
        let provider = SdkTracerProvider::builder()
            .with_span_processor(QueueProcessor(queue.clone()))
            .with_sampler(settings.sampler.sampler())
            .with_resource(resource.clone())
            .build();
        let tracer = provider.tracer("vercel-mcp");
        Self(Some(Arc::new(Inner {
            metrics: metrics::Registry::default(),
            traces_endpoint: settings.traces_endpoint.clone(),
            metrics_endpoint: settings.metrics_endpoint.clone(),
            headers: settings.headers.clone(),
            service_name: settings.service_name.clone(),
            resource,
            started_ns: now_ns(),
            flush_pending: std::sync::atomic::AtomicBool::new(false),
            tracer,
            _provider: provider,
            queue,
        })))
    }

    /// Whether spans are recorded.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Starts the SERVER span of one request named `name`, as of `started_at_ms`, a child of the
    /// caller's `traceparent` if it sent a valid one.
    /// `attributes` are its first (room is made for the ones added later).
    pub fn request_span(
        &self,
        name: String,
        traceparent: Option<&str>,
        started_at_ms: u64,
        attributes: Vec<KeyValue>,
    ) -> SpanHandle {
        let Some(inner) = &self.0 else { return SpanHandle::default() };
        let parent = traceparent
            .and_then(parse_traceparent)
            .map_or_else(Context::new, |remote| Context::new().with_remote_span_context(remote));
        let start = std::time::UNIX_EPOCH + Duration::from_millis(started_at_ms);
        let span = inner
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&inner.tracer, &parent);
        SpanHandle(Some(Traced { cx: parent.with_span(span), telemetry: self.clone() }))
    }

    /// Runs `future` under the caller's `traceparent` (or as a root) before the request's own
    /// span exists, so that an outbound call it makes (a JWKS fetch during authentication) is a
    /// CLIENT span in the caller's trace. With tracing off, `future` runs as it is.
    pub fn under_caller<'a, F: std::future::Future>(
        &self,
        traceparent: impl FnOnce() -> Option<&'a str>,
        future: F,
    ) -> futures_util::future::Either<opentelemetry::context::WithContext<F>, F> {
        use opentelemetry::context::FutureExt;
        if !self.is_on() {
            return futures_util::future::Either::Right(future);
        }
        let parent = traceparent()
            .and_then(parse_traceparent)
            .map_or_else(Context::new, |remote| Context::new().with_remote_span_context(remote));
        futures_util::future::Either::Left(future.with_context(parent.with_value(self.clone())))
    }

    /// Starts a span of `kind` under `parent` (a request's span), or a root span linked to
    /// `link` (a job delivery, linked to the request that submitted it).
    fn start(
        &self,
        name: impl Into<std::borrow::Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&Context>,
        link: Option<SpanContext>,
        attributes: Vec<KeyValue>,
    ) -> SpanHandle {
        let Some(inner) = &self.0 else { return SpanHandle::default() };
        let mut builder = inner.tracer.span_builder(name).with_kind(kind).with_attributes(attributes);
        if let Some(link) = link {
            builder = builder.with_links(vec![Link::with_context(link)]);
        }
        let root = Context::new();
        let parent = parent.unwrap_or(&root);
        let span = builder.start_with_context(&inner.tracer, parent);
        SpanHandle(Some(Traced { cx: parent.with_span(span), telemetry: self.clone() }))
    }

    /// A CONSUMER span for one delivery of a job, linked to the span that submitted it (from
    /// the message's `traceparent`), in the same trace when there is one.
    pub fn delivery_span(&self, submitted_by: Option<&str>) -> SpanHandle {
        let link = submitted_by.and_then(parse_traceparent);
        let parent = link.clone().map(|remote| Context::new().with_remote_span_context(remote));
        self.start("process jobs", SpanKind::Consumer, parent.as_ref(), link, Vec::new())
    }

    /// Exports every finished span as one batch, then the metrics (cumulative). Export failures
    /// are dropped (the next flush does not retry spans; metrics are cumulative anyway):
    /// telemetry never holds up or fails a request.
    pub async fn flush(&self) {
        let Some(inner) = &self.0 else { return };
        let batch = std::mem::take(&mut *inner.queue.spans.lock().expect("span queue"));
        if !batch.is_empty() {
            inner.post(&inner.traces_endpoint, otlp::encode_traces(&inner.resource, &batch)).await;
        }
        let (Some(endpoint), Some(export)) =
            (&inner.metrics_endpoint, inner.metrics.export(&inner.service_name, inner.started_ns, now_ns()))
        else {
            return;
        };
        use prost::Message;
        inner.post(endpoint, export.encode_to_vec()).await;
    }

    /// Records `value` in the histogram `name` (seconds) for `series`.
    pub fn record(&self, name: &'static str, series: metrics::Series, value: Duration) {
        if let Some(inner) = &self.0 {
            inner.metrics.record(name, series, value);
        }
    }

    /// Adds `n` to the counter `name` for `series`.
    pub fn add(&self, name: &'static str, series: metrics::Series, n: u64) {
        if let Some(inner) = &self.0 {
            inner.metrics.add(name, series, n);
        }
    }

    /// A flush to run after a response (on Vercel, through `wait_until`), unless one is already
    /// waiting: it runs [`FLUSH_EVERY`] after it was asked for, or as soon as a full batch
    /// ([`EXPORT_BATCH`] spans) is waiting, exporting everything finished by then. Under load that
    /// is one export a second or one per batch; a lone request's spans still leave within a
    /// second of its response.
    pub fn flush_soon(&self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        use std::sync::atomic::Ordering;
        let inner = self.0.as_ref()?;
        if inner.flush_pending.swap(true, Ordering::AcqRel) {
            return None;
        }
        let telemetry = self.clone();
        Some(async move {
            if let Some(inner) = &telemetry.0 {
                // A second, or less if a full batch is waiting.
                let _ = tokio::time::timeout(FLUSH_EVERY, inner.queue.batch_ready.notified()).await;
                inner.flush_pending.store(false, Ordering::Release);
            }
            telemetry.flush().await;
        })
    }

    /// Flushes every `every`, and whenever a full batch is waiting, for the life of the process
    /// (a long-running server).
    pub fn flush_periodically(&self, every: Duration) {
        if !self.is_on() {
            return;
        }
        let telemetry = self.clone();
        tokio::spawn(async move {
            let Some(inner) = telemetry.0.clone() else { return };
            loop {
                // Every `every`, or as soon as a full batch is waiting.
                let _ = tokio::time::timeout(every, inner.queue.batch_ready.notified()).await;
                telemetry.flush().await;
            }
        });
    }

    /// Spans dropped because the queue was full between two flushes.
    pub fn dropped_spans(&self) -> u64 {
        self.0.as_ref().map_or(0, |inner| *inner.queue.dropped.lock().expect("span queue"))
    }
}

/// A span being recorded, or nothing (tracing off, or not sampled in).
#[derive(Clone, Default)]
pub struct SpanHandle(Option<Traced>);

#[derive(Clone)]
struct Traced {
    cx: Context,
    telemetry: Telemetry,
}

impl std::fmt::Debug for SpanHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanHandle").field("recording", &self.0.is_some()).finish()
    }
}

impl SpanHandle {
    /// Adds attributes.
    pub fn set(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if let Some(traced) = &self.0 {
            traced.cx.span().set_attributes(attributes);
        }
    }

    /// Marks the span failed, with `error.type`.
    pub fn fail(&self, error_type: &'static str) {
        if let Some(traced) = &self.0 {
            traced.cx.span().set_attribute(KeyValue::new("error.type", error_type));
            traced.cx.span().set_status(Status::error(error_type));
        }
    }

    /// A child span of this one, for a handler's own step (`ctx.span().child("fetch page",
    /// telemetry::SpanKind::Client)`); end it with [`SpanHandle::end`]. Nothing when tracing is off.
    pub fn child(&self, name: impl Into<std::borrow::Cow<'static, str>>, kind: SpanKind) -> SpanHandle {
        match &self.0 {
            Some(traced) => traced.telemetry.start(name, kind, Some(&traced.cx), None, Vec::new()),
            None => SpanHandle::default(),
        }
    }

    /// An INTERNAL child span for running the tool `tool_name` (GenAI `execute_tool`), or nothing
    /// when tracing is off: the name and attributes are built only for a recorded span, since
    /// every tool call passes here.
    pub fn execute_tool_span(&self, tool_name: &str) -> SpanHandle {
        let Some(traced) = &self.0 else { return SpanHandle::default() };
        let attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool_name.to_owned()),
        ];
        traced.telemetry.start(
            format!("execute_tool {tool_name}"),
            SpanKind::Internal,
            Some(&traced.cx),
            None,
            attributes,
        )
    }

    /// The telemetry this span records to (for metrics), if it is on.
    pub fn telemetry(&self) -> Option<&Telemetry> {
        self.0.as_ref().map(|traced| &traced.telemetry)
    }

    /// This span as a W3C `traceparent`, for whatever continues its work elsewhere.
    pub fn traceparent(&self) -> Option<String> {
        let traced = self.0.as_ref()?;
        let span = traced.cx.span();
        let context = span.span_context();
        context
            .is_valid()
            .then(|| format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8()))
    }

    /// Runs `future` with this span current, so what it calls through the outbound client gets
    /// a CLIENT span under it and carries its `traceparent` onward. With tracing off, `future`
    /// runs as it is.
    pub fn in_context<F: std::future::Future>(
        &self,
        future: F,
    ) -> futures_util::future::Either<opentelemetry::context::WithContext<F>, F> {
        use opentelemetry::context::FutureExt;
        match &self.0 {
            Some(traced) => {
                futures_util::future::Either::Left(future.with_context(traced.cx.with_value(traced.telemetry.clone())))
            }
            None => futures_util::future::Either::Right(future),
        }
    }

    /// Ends the span.
    pub fn end(&self) {
        if let Some(traced) = &self.0 {
            traced.cx.span().end();
        }
    }
}

/// Runs one Redis operation (`operation`, e.g. `job.advance`) as a CLIENT span under the span
/// current in this task, if there is one; a failure marks it.
pub async fn redis_span<T, E>(
    operation: &'static str,
    future: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    database_span("redis", operation, future).await
}

/// Runs one database call as a CLIENT span named `{system} {operation}` (`postgresql
/// products.by_id`) under the span current in this task, if there is one; a failure marks it.
/// The operation is a fixed name chosen by the caller: never the statement or its values.
pub async fn database_span<T, E>(
    system: &'static str,
    operation: &'static str,
    future: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let current = Context::current();
    let Some(telemetry) = current.get::<Telemetry>() else { return future.await };
    let attributes = vec![KeyValue::new("db.system.name", system), KeyValue::new("db.operation.name", operation)];
    let span = telemetry.start(format!("{system} {operation}"), SpanKind::Client, Some(&current), None, attributes);
    let outcome = future.await;
    if outcome.is_err() {
        span.fail("store_error");
    }
    span.end();
    outcome
}

/// `future` under the span current now, for work that outlives its caller (a spawned publish).
pub fn carry_current<F: std::future::Future>(future: F) -> opentelemetry::context::WithContext<F> {
    use opentelemetry::context::FutureExt;
    future.with_context(Context::current())
}

/// A CLIENT span for an outbound request, under the span current in this task ([`SpanHandle::in_context`]),
/// or nothing. Named after the method, with the host only: paths and queries may carry tokens.
pub fn outbound_span(method: &str, host: &str) -> SpanHandle {
    let current = Context::current();
    let Some(telemetry) = current.get::<Telemetry>() else { return SpanHandle::default() };
    let attributes =
        vec![KeyValue::new("http.request.method", method.to_owned()), KeyValue::new("server.address", host.to_owned())];
    telemetry.start(method.to_owned(), SpanKind::Client, Some(&current), None, attributes)
}

/// The trace id of a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`), if well formed.
pub fn trace_id_from(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (Some(version), Some(trace), Some(span), Some(flags), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2) && trace.bytes().any(|b| b != b'0'))
        .then_some(trace)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A valid W3C `traceparent`'s span context (version 00; anything malformed is no parent).
fn parse_traceparent(traceparent: &str) -> Option<SpanContext> {
    let trace = trace_id_from(traceparent)?;
    let mut parts = traceparent.split('-');
    let span = parts.nth(2)?;
    let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
    let span_id = opentelemetry::trace::SpanId::from_hex(span).ok()?;
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        span_id,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// Finished spans between flushes.
#[derive(Debug, Default)]
struct SpanQueue {
    spans: Mutex<Vec<SpanData>>,
    dropped: Mutex<u64>,
    /// Woken when the queue reaches [`EXPORT_BATCH`] spans.
    batch_ready: tokio::sync::Notify,
}

/// The span processor: queues each finished span for [`Telemetry::flush`]. (The SDK's batch
/// processor exports from a thread of its own, which neither a frozen serverless instance nor a
/// tokio-based HTTP client suits.)
#[derive(Debug)]
struct QueueProcessor(Arc<SpanQueue>);

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &Context) {}

    fn on_end(&self, span: SpanData) {
        let mut spans = self.0.spans.lock().expect("span queue");
        if spans.len() < MAX_QUEUED_SPANS {
            spans.push(span);
            if spans.len() == EXPORT_BATCH {
                // Stored if no flush is waiting yet: the next one to wait starts at once.
                self.0.batch_ready.notify_one();
            }
        } else {
            *self.0.dropped.lock().expect("span queue") += 1;
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_traceparent() {
        assert_eq!(
            trace_id_from("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-x-y-z",
        ] {
            assert_eq!(trace_id_from(bad), None, "{bad}");
        }
    }
}
