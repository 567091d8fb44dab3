//! OpenTelemetry traces (the official API and SDK), exported over OTLP/HTTP (protobuf): a SERVER
//! span per MCP request, a child span per tool call, and a span per job delivery linked to the
//! request that submitted the job.
//!
//! Off unless an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SDK_DISABLED=true` turns it off again). Off, a
//! [`Telemetry`] is an empty handle and every span operation is a branch on `None`.
//!
//! Finished spans wait in a bounded in-memory queue; [`Telemetry::flush`] exports them as one
//! batch. On Vercel the edge registers a flush through the runtime's `wait_until` once everything
//! a request started has ended (one at a time, a second later: [`Telemetry::flush_soon`]), so the
//! response never waits and the instance is not frozen before the batch is sent; the local run
//! flushes every second. Either exports at once when 1024 spans are waiting, and again at every
//! further 1024. One export is in flight at a time; a failed one is counted
//! ([`Telemetry::export_failures`]), and the edges log the count (`telemetry.export_failed`). The batch is written as OTLP
//! protobuf straight from the SDK's span data (`otlp.rs`) and sent with the crate's own outbound
//! client (rustls with ring), so no second HTTP stack is linked.
//!
//! Privacy: attributes carry the method, the tool or resource name, the JSON-RPC id and error
//! code, the outcome and the protocol version; never arguments, tokens, handles or
//! `requestState`.

mod metrics;
mod otlp;
mod sampling;

pub use metrics::{JOB_DELIVERIES, JOBS_SUBMITTED, OPERATION_DURATION, QUEUE_LAG, Series, TOOL_DURATION};
/// The kind a handler gives its own span ([`SpanHandle::child`]).
pub use opentelemetry::trace::SpanKind;

use opentelemetry::trace::{
    Link, SpanContext, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanProcessor};
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
    /// `OTEL_SERVICE_NAME`, else the `service.name` of `OTEL_RESOURCE_ATTRIBUTES`, else
    /// `vercel-mcp`.
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES` (`key=value,…`, values percent-decoded): what every export's
    /// resource says besides `service.name`.
    pub resource_attributes: Vec<(String, String)>,
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
    pub sampler: SamplerChoice,
    /// Where metrics go: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// followed by `/v1/metrics`; `None` with `OTEL_METRICS_EXPORTER=none` or only a traces
    /// endpoint.
    pub metrics_endpoint: Option<String>,
    /// The key a sampling ratio hashes trace ids under (a caller chooses its trace id, and must
    /// not be able to choose one the ratio always takes). [`settings_from`] draws a random one;
    /// the configuration replaces it with one derived from the state secret, so every instance
    /// of a deployment decides alike for one trace.
    pub sampling_key: [u8; 32],
    /// `MCP_TRACE_PROPAGATE_HOSTS` (host names, comma-separated, compared without case): the
    /// only hosts an outbound call sends its `traceparent` to. None by default: a trace id is the
    /// caller's, and a third party (an identity provider fetched for keys, the platform's APIs)
    /// has no business joining it.
    pub propagate_to: Vec<String>,
}

impl std::fmt::Debug for TelemetrySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are credentials; their names are not.
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TelemetrySettings")
            .field("traces_endpoint", &self.traces_endpoint)
            .field("headers", &names)
            .field("service_name", &self.service_name)
            .field("resource_attributes", &self.resource_attributes)
            .field("sampler", &self.sampler)
            .field("metrics_endpoint", &self.metrics_endpoint)
            .field("propagate_to", &self.propagate_to)
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

/// An OTLP endpoint as the exporter sends to it: an http(s) URL with a host, written the way a
/// URL parser writes it (a space in its path percent-encoded, an international host in
/// punycode), so that every export can be addressed; `None` when it is not such a URL.
fn otlp_url(raw: &str) -> Option<String> {
    let url = url::Url::parse(raw).ok().filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())?;
    url.as_str().parse::<http::Uri>().is_ok().then(|| url.into())
}

/// Reads the `OTEL_*` variables through `var`: `Ok(None)` when tracing is off.
pub fn settings_from(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<TelemetrySettings>, Vec<String>> {
    let mut problems = Vec::new();
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    // Each endpoint with the variable it came from, which a refusal names.
    let (endpoint, from) = match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        (Some(traces), _) => (traces.trim().to_owned(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        (None, Some(base)) => {
            (format!("{}/v1/traces", base.trim().trim_end_matches('/')), "OTEL_EXPORTER_OTLP_ENDPOINT")
        }
        (None, None) => return Ok(None),
    };
    let endpoint = otlp_url(&endpoint).unwrap_or_else(|| {
        problems.push(format!("{from} must be an http(s) URL"));
        endpoint
    });
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
    // Read here rather than by the SDK's detector (which reads the process's environment), like
    // every other setting. A pair without `=` is left out, as the SDK did.
    let resource_attributes: Vec<(String, String)> = var("OTEL_RESOURCE_ATTRIBUTES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), percent_decode(value.trim())))
        .filter(|(key, _)| !key.is_empty())
        .collect();
    let service_name = var("OTEL_SERVICE_NAME")
        .filter(|s| !s.trim().is_empty())
        .or_else(|| resource_attributes.iter().find(|(key, _)| key == "service.name").map(|(_, name)| name.clone()))
        .unwrap_or_else(|| "vercel-mcp".into());
    let metrics_off = var("OTEL_METRICS_EXPORTER").is_some_and(|v| v.trim() == "none");
    let metrics_endpoint = match (var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        _ if metrics_off => None,
        (Some(metrics), _) => Some((metrics.trim().to_owned(), "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")),
        (None, Some(base)) => {
            Some((format!("{}/v1/metrics", base.trim().trim_end_matches('/')), "OTEL_EXPORTER_OTLP_ENDPOINT"))
        }
        (None, None) => None,
    };
    let metrics_endpoint = match metrics_endpoint.map(|(e, from)| (otlp_url(&e), from)) {
        Some((None, from)) => return Err(vec![format!("{from} must be an http(s) URL")]),
        Some((Some(url), _)) => Some(url),
        None => None,
    };
    // The headers are usually the backend's credential: never in clear beyond this machine.
    let in_clear = [Some(&endpoint), metrics_endpoint.as_ref()]
        .into_iter()
        .flatten()
        .any(|url| !crate::outbound::encrypted_or_loopback(url));
    if !headers.is_empty() && in_clear {
        return Err(vec![
            "OTEL_EXPORTER_OTLP_HEADERS is set, so the OTLP endpoints that carry them must be https (or http to a \
             loopback host)"
                .to_owned(),
        ]);
    }
    Ok(Some(TelemetrySettings {
        traces_endpoint: endpoint,
        headers,
        service_name,
        resource_attributes,
        sampler,
        metrics_endpoint,
        sampling_key: random_key(),
        propagate_to: var("MCP_TRACE_PROPAGATE_HOSTS")
            .unwrap_or_default()
            .split(',')
            .map(|host| host.trim().to_ascii_lowercase())
            .filter(|host| !host.is_empty())
            .collect(),
    }))
}

/// A key of this process's own, for settings read without a state secret to derive one from.
fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key).expect("the system's randomness");
    key
}

/// What every export of this process says produced it, spans and metrics alike: the SDK's own
/// attributes (`telemetry.sdk.*`), `OTEL_RESOURCE_ATTRIBUTES`, `service.name`, and a random
/// `service.instance.id` unless those attributes name one, so that two instances' cumulative
/// metrics are two series rather than one that goes back and forth.
fn resource(settings: &TelemetrySettings) -> Resource {
    let mut attributes: Vec<KeyValue> =
        settings.resource_attributes.iter().map(|(key, value)| KeyValue::new(key.clone(), value.clone())).collect();
    if !settings.resource_attributes.iter().any(|(key, _)| key == "service.instance.id") {
        attributes.push(KeyValue::new("service.instance.id", instance_id()));
    }
    Resource::builder_empty()
        .with_detector(Box::new(opentelemetry_sdk::resource::TelemetryResourceDetector))
        .with_attributes(attributes)
        .with_service_name(settings.service_name.clone())
        .build()
}

/// A random UUID (version 4), as the semantic conventions suggest for `service.instance.id`.
fn instance_id() -> String {
    use opentelemetry_sdk::trace::IdGenerator;
    let mut bytes = opentelemetry_sdk::trace::RandomIdGenerator::default().new_trace_id().to_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = format!("{:032x}", u128::from_be_bytes(bytes));
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
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
    /// What every export says produced it ([`resource`]), for spans and, as OTLP, for metrics.
    resource: Resource,
    metrics_resource: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
    started_ns: u64,
    /// A coalesced flush is waiting to run ([`Telemetry::flush_soon`]).
    flush_pending: std::sync::atomic::AtomicBool,
    /// Held while an export is being sent: one at a time, so a collector that never answers
    /// holds one batch, not one per flush.
    exporting: tokio::sync::Mutex<()>,
    /// Exports the collector refused or that did not reach it, and the last one's status.
    failures: ExportFailureCount,
    /// The hosts outbound calls send their `traceparent` to.
    propagate_to: Vec<String>,
    tracer: SdkTracer,
    // Kept so the tracer stays connected to its processor.
    _provider: SdkTracerProvider,
    queue: Arc<SpanQueue>,
}

impl Inner {
    /// Exports every finished span as one batch, then the metrics; the caller holds `exporting`.
    async fn export(&self) {
        let batch = std::mem::take(&mut *self.queue.spans.lock().expect("span queue"));
        if !batch.is_empty() {
            self.post(&self.traces_endpoint, otlp::encode_traces(&self.resource, &batch)).await;
        }
        let (Some(endpoint), Some(export)) =
            (&self.metrics_endpoint, self.metrics.export(&self.metrics_resource, self.started_ns, now_ns()))
        else {
            return;
        };
        use prost::Message;
        self.post(endpoint, export.encode_to_vec()).await;
    }

    /// Sends one OTLP/HTTP protobuf export, with the configured headers; only the status is
    /// read, and anything but a 2xx is counted as a failure.
    async fn post(&self, endpoint: &str, body: Vec<u8>) {
        let mut request = http::Request::post(endpoint).header(http::header::CONTENT_TYPE, "application/x-protobuf");
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        // The endpoint was checked at start-up; a request that still cannot be built is a
        // failed export like any other, never a batch dropped unsaid.
        let Ok(request) = request.body(http_body_util::Full::new(bytes::Bytes::from(body))) else {
            return self.failures.count(None);
        };
        match crate::outbound::send(request, Duration::from_secs(10)).await {
            Ok(response) if response.status.is_success() => {}
            Ok(response) => self.failures.count(Some(response.status)),
            Err(_) => self.failures.count(None),
        }
    }
}

/// The flush [`Telemetry::flush_soon`] promised, until its wait is over: dropped then, or with
/// the flush's future if its caller gives up on it before, so that later flushes are asked for.
struct PendingFlush(Arc<Inner>);

impl Drop for PendingFlush {
    fn drop(&mut self) {
        self.0.flush_pending.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Failed exports since the process started: a wrong credential in `OTEL_EXPORTER_OTLP_HEADERS`
/// otherwise only shows as an empty backend. Counted here, below the logger's layer; whatever
/// holds a [`Telemetry`] and a logger can read [`Telemetry::export_failures`] and report it.
#[derive(Debug, Default)]
struct ExportFailureCount {
    count: std::sync::atomic::AtomicU64,
    /// The last failure's status code; 0 when it had none (no connection, a timeout).
    last_status: std::sync::atomic::AtomicU16,
    /// How many of them were reported, how many dropped spans, and when the last report was
    /// (ms since the epoch).
    reported: std::sync::atomic::AtomicU64,
    reported_dropped: std::sync::atomic::AtomicU64,
    reported_at_ms: std::sync::atomic::AtomicU64,
}

impl ExportFailureCount {
    fn count(&self, status: Option<http::StatusCode>) {
        use std::sync::atomic::Ordering;
        self.last_status.store(status.map_or(0, |s| s.as_u16()), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The last failure's status code, if it had one.
    fn last_status(&self) -> Option<u16> {
        Some(self.last_status.load(std::sync::atomic::Ordering::Relaxed)).filter(|status| *status != 0)
    }
}

/// [`Telemetry::export_failures`]: how many exports failed, and how the last one did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportFailures {
    /// Exports answered with a status other than 2xx, or not answered at all.
    pub count: u64,
    /// The last failed export's status code, if it had one (`None`: no connection, a timeout,
    /// or no failure yet).
    pub last_status: Option<u16>,
    /// Finished spans dropped because the queue was full: exports failing, or not keeping up.
    pub dropped_spans: u64,
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
        let resource = resource(settings);
        let metrics_resource = opentelemetry_proto::transform::common::tonic::Attributes::from(
            resource.iter().map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .0;
        let queue = Arc::new(SpanQueue::default());
        let provider = SdkTracerProvider::builder()
            // Set here, so that the SDK does not read OTEL_SPAN_*_LIMIT from the process's
            // environment, unchecked (a limit of 0 would strip every attribute).
            .with_span_limits(opentelemetry_sdk::trace::SpanLimits::default())
            .with_span_processor(QueueProcessor(queue.clone()))
            .with_sampler(sampling::Gate::new(settings.sampler, &settings.sampling_key))
            .with_resource(resource.clone())
            .build();
        let tracer = provider.tracer("vercel-mcp");
        Self(Some(Arc::new(Inner {
            metrics: metrics::Registry::default(),
            traces_endpoint: settings.traces_endpoint.clone(),
            metrics_endpoint: settings.metrics_endpoint.clone(),
            headers: settings.headers.clone(),
            resource,
            metrics_resource,
            started_ns: now_ns(),
            flush_pending: std::sync::atomic::AtomicBool::new(false),
            exporting: tokio::sync::Mutex::new(()),
            failures: ExportFailureCount::default(),
            propagate_to: settings.propagate_to.clone(),
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

    /// Exports every finished span as one batch, then the metrics (cumulative), after the export
    /// in flight if there is one (only one is sent at a time). Export failures are counted
    /// ([`Telemetry::export_failures`]) and dropped (the next flush does not retry spans; metrics
    /// are cumulative anyway): telemetry never holds up or fails a request.
    pub async fn flush(&self) {
        let Some(inner) = &self.0 else { return };
        let _exporting = inner.exporting.lock().await;
        inner.export().await;
    }

    /// Exports that failed since the process started (answered with a status other than 2xx,
    /// or not answered), and the last one's status.
    pub fn export_failures(&self) -> ExportFailures {
        use std::sync::atomic::Ordering;
        self.0.as_ref().map_or_else(ExportFailures::default, |inner| ExportFailures {
            count: inner.failures.count.load(Ordering::Relaxed),
            last_status: inner.failures.last_status(),
            dropped_spans: self.dropped_spans(),
        })
    }

    /// The failures and the dropped spans since the last report, when there are some and the
    /// last report is at least `interval_ms` old (by `now_ms`): one caller in any number gets
    /// them, and they count as reported. What an edge logs, so a refusing collector makes one line
    /// a minute, not one a request, and spans lost to a full queue are not lost silently.
    pub fn unreported_export_failures(&self, now_ms: u64, interval_ms: u64) -> Option<ExportFailures> {
        use std::sync::atomic::Ordering;
        let failures = &self.0.as_ref()?.failures;
        let (count, reported) = (failures.count.load(Ordering::Relaxed), failures.reported.load(Ordering::Relaxed));
        let (dropped, reported_dropped) = (self.dropped_spans(), failures.reported_dropped.load(Ordering::Relaxed));
        let last = failures.reported_at_ms.load(Ordering::Relaxed);
        if (count <= reported && dropped <= reported_dropped)
            || (last != 0 && now_ms < last.saturating_add(interval_ms))
        {
            return None;
        }
        failures.reported_at_ms.compare_exchange(last, now_ms.max(1), Ordering::AcqRel, Ordering::Relaxed).ok()?;
        failures.reported.store(count, Ordering::Relaxed);
        failures.reported_dropped.store(dropped, Ordering::Relaxed);
        Some(ExportFailures {
            count: count.saturating_sub(reported),
            last_status: failures.last_status(),
            dropped_spans: dropped.saturating_sub(reported_dropped),
        })
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
    /// second of its response. If an export is still being sent by then, it sends nothing and
    /// the spans wait, queued, for the next flush: at most one export is in flight, however
    /// slow the collector, and a flush never waits for another.
    pub fn flush_soon(&self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        use std::sync::atomic::Ordering;
        let inner = self.0.as_ref()?;
        if inner.flush_pending.swap(true, Ordering::AcqRel) {
            return None;
        }
        let pending = PendingFlush(inner.clone());
        Some(async move {
            let inner = pending.0.clone();
            // A second, or less if a full batch is waiting.
            let _ = tokio::time::timeout(FLUSH_EVERY, inner.queue.batch_ready.notified()).await;
            drop(pending);
            // Waiting here instead would keep one flush (and its invocation) per second
            // waiting behind a collector that does not answer.
            let Ok(_exporting) = inner.exporting.try_lock() else { return };
            inner.export().await;
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

    /// [`SpanHandle::traceparent`] for a call to `host`: only a host `MCP_TRACE_PROPAGATE_HOSTS`
    /// names receives it.
    pub fn traceparent_for(&self, host: &str) -> Option<String> {
        let traced = self.0.as_ref()?;
        let inner = traced.telemetry.0.as_ref()?;
        inner.propagate_to.iter().any(|allowed| allowed.eq_ignore_ascii_case(host)).then(|| self.traceparent())?
    }

    /// This span as a W3C `traceparent` value, to carry the trace where this process continues
    /// it (a job's message); `None` when nothing is recorded.
    pub fn traceparent(&self) -> Option<String> {
        let traced = self.0.as_ref()?;
        let span = traced.cx.span();
        let context = span.span_context();
        context
            .is_valid()
            .then(|| format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8()))
    }

    /// This span's trace id (32 lowercase hex digits), sampled or not: what the request's log
    /// line carries, so that the line leads to its trace.
    pub fn trace_id(&self) -> Option<String> {
        let traced = self.0.as_ref()?;
        let span = traced.cx.span();
        let context = span.span_context();
        context.is_valid().then(|| context.trace_id().to_string())
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

/// The trace id of a valid `traceparent` value ([`traceparent_fields`]).
pub fn trace_id_from(traceparent: &str) -> Option<&str> {
    traceparent_fields(traceparent).map(|(trace, _, _)| trace)
}

/// The trace id, parent span id and flags of a `traceparent` valid under W3C Trace Context:
/// `{version}-{32 hex}-{16 hex}-{2 hex}`, lowercase hex only, neither id all zero; version `ff`
/// is invalid, version `00` is exactly those 55 characters, and a later version may carry more
/// fields after the flags (`-` first), which are not read. [`trace_id_from`] (the log line's trace)
/// and [`parse_traceparent`] (the span's parent) both read through this, so a value one takes the
/// other takes too.
fn traceparent_fields(traceparent: &str) -> Option<(&str, &str, &str)> {
    let (head, rest) = (traceparent.get(..55)?, traceparent.get(55..)?);
    let well_formed = head.bytes().enumerate().all(|(at, b)| match at {
        2 | 35 | 52 => b == b'-',
        _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
    });
    if !well_formed {
        return None;
    }
    // Every byte of `head` is ASCII now, so these slices are on character boundaries.
    let (version, trace, span, flags) = (&head[..2], &head[3..35], &head[36..52], &head[53..]);
    let rest_allowed = match version {
        "ff" => false,
        "00" => rest.is_empty(),
        _ => rest.is_empty() || rest.starts_with('-'),
    };
    let not_zero = |id: &str| id.bytes().any(|b| b != b'0');
    (rest_allowed && not_zero(trace) && not_zero(span)).then_some((trace, span, flags))
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A valid W3C `traceparent`'s span context ([`traceparent_fields`]; anything else is no parent).
fn parse_traceparent(traceparent: &str) -> Option<SpanContext> {
    let (trace, span, flags) = traceparent_fields(traceparent)?;
    // Checked hex already: none of these can fail.
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        opentelemetry::trace::SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    ))
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
            // At every full batch, not only the first: a flush that found an export in flight
            // left its batch queued, and the next full batch wakes the next flush.
            if spans.len() % EXPORT_BATCH == 0 {
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

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    /// Whether `traceparent` is taken, checking that the log line's reading of it
    /// ([`trace_id_from`]) and the span's ([`parse_traceparent`]) agree.
    fn accepted(traceparent: &str) -> bool {
        let logged = trace_id_from(traceparent);
        let parent = parse_traceparent(traceparent);
        assert_eq!(logged.map(str::to_owned), parent.map(|c| c.trace_id().to_string()), "{traceparent:?}");
        logged.is_some()
    }

    #[test]
    fn a_version_00_traceparent_is_exactly_55_characters() {
        let valid = format!("00-{TRACE}-{SPAN}-01");
        assert_eq!(trace_id_from(&valid), Some(TRACE));
        assert!(accepted(&format!("00-{TRACE}-{SPAN}-00")), "not sampled");
        let parent = parse_traceparent(&valid).unwrap();
        assert!(parent.is_sampled() && parent.is_remote());
        assert_eq!(parent.span_id().to_string(), SPAN);
        for bad in [
            String::new(),
            format!("00-{TRACE}-{SPAN}"),
            format!("00-{TRACE}-{SPAN}-01-extra"),
            format!("00-{TRACE}-{SPAN}-01-"),
            format!("00-{TRACE}-{SPAN}-01 "),
            format!("00-{TRACE}-{SPAN}-1"),
            format!("00-{TRACE}0-{SPAN}-1"),
            format!("00_{TRACE}-{SPAN}-01"),
            "00-x-y-z".to_owned(),
        ] {
            assert!(!accepted(&bad), "{bad:?}");
        }
    }

    #[test]
    fn version_ff_is_refused() {
        assert!(!accepted(&format!("ff-{TRACE}-{SPAN}-01")));
        assert!(!accepted(&format!("ff-{TRACE}-{SPAN}-01-extra")));
    }

    #[test]
    fn a_later_version_may_carry_more_fields_after_the_flags() {
        for later in [
            format!("01-{TRACE}-{SPAN}-01"),
            format!("01-{TRACE}-{SPAN}-01-what-comes-next"),
            format!("cc-{TRACE}-{SPAN}-09-"),
        ] {
            assert!(accepted(&later), "{later:?}");
        }
        let parent = parse_traceparent(&format!("01-{TRACE}-{SPAN}-03-more")).unwrap();
        assert!(parent.is_sampled(), "the flags are read");
        // More is allowed only as fields of their own.
        assert!(!accepted(&format!("01-{TRACE}-{SPAN}-01x")));
        assert!(!accepted(&format!("01-{TRACE}-{SPAN}-01.more")));
    }

    #[test]
    fn an_all_zero_trace_or_span_id_is_refused() {
        let zeros = |n| "0".repeat(n);
        assert!(!accepted(&format!("00-{}-{SPAN}-01", zeros(32))));
        assert!(!accepted(&format!("00-{TRACE}-{}-01", zeros(16))));
        assert!(!accepted(&format!("01-{TRACE}-{}-01-more", zeros(16))));
    }

    #[test]
    fn only_lowercase_hex_is_taken() {
        for bad in [
            format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
            format!("00-{TRACE}-{}-01", SPAN.to_uppercase()),
            format!("0A-{TRACE}-{SPAN}-01"),
            format!("00-{TRACE}-{SPAN}-0A"),
            format!("00-{}g-{SPAN}-01", &TRACE[..31]),
            // Not ASCII at all, with every field at its length in bytes.
            format!("00-{}é-{SPAN}-01", &TRACE[..30]),
        ] {
            assert!(!accepted(&bad), "{bad:?}");
        }
    }

    /// The log line takes its trace id from a `traceparent` exactly when the span takes it as
    /// its parent: a value one reads and the other refuses gives the line a trace no span has.
    #[test]
    fn the_log_line_and_the_span_take_the_same_traceparents() {
        for traceparent in [
            format!("00-{TRACE}-{SPAN}-01"),
            format!("00-{TRACE}-0000000000000000-01"),
            format!("00-{TRACE}-{SPAN}-zz"),
            format!("ff-{TRACE}-{SPAN}-01"),
            format!("01-{TRACE}-{SPAN}-01-more"),
        ] {
            accepted(&traceparent);
        }
    }

    /// A flush whose caller dropped it before it ran does not keep every later one from being
    /// asked for (the flag that coalesces them goes with it).
    #[test]
    fn a_flush_given_up_does_not_stop_the_next() {
        let telemetry = Telemetry::new(&settings(&[]));
        let first = telemetry.flush_soon().expect("the first flush");
        assert!(telemetry.flush_soon().is_none(), "one is waiting");
        drop(first);
        assert!(telemetry.flush_soon().is_some(), "the next may be asked for");
    }

    /// Every full batch wakes a flush, not only the first: a flush that found an export in flight
    /// leaves its batch queued, and the spans that follow must not wait for the next tick.
    #[test]
    fn every_full_batch_wakes_a_flush() {
        use futures_util::FutureExt;
        let telemetry = Telemetry::new(&settings(&[]));
        let queue = &telemetry.0.as_ref().unwrap().queue;
        let spans = |n: usize| {
            for _ in 0..n {
                telemetry.request_span("tools/list".into(), None, 0, Vec::new()).end();
            }
        };
        spans(EXPORT_BATCH);
        assert!(queue.batch_ready.notified().now_or_never().is_some(), "the first batch");
        spans(EXPORT_BATCH - 1);
        assert!(queue.batch_ready.notified().now_or_never().is_none(), "not a full batch more");
        spans(1);
        assert!(queue.batch_ready.notified().now_or_never().is_some(), "the second, the first still queued");
    }

    fn settings(vars: &[(&str, &str)]) -> TelemetrySettings {
        let vars: std::collections::HashMap<&str, &str> = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]
            .into_iter()
            .chain(vars.iter().copied())
            .collect();
        settings_from(&|name| vars.get(name).map(|v| (*v).to_owned())).unwrap().unwrap()
    }

    fn resource_of(settings: &TelemetrySettings) -> std::collections::HashMap<String, String> {
        resource(settings).iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
    }

    /// Headers are usually the backend's credential: with them, every endpoint that carries them
    /// must be https or loopback; without them, plain http anywhere is the operator's choice.
    #[test]
    fn headers_go_over_tls_or_to_this_machine_only() {
        let read = |vars: &[(&'static str, &'static str)]| {
            let vars: std::collections::HashMap<&str, &str> = vars.iter().copied().collect();
            settings_from(&|name| vars.get(name).map(|v| (*v).to_owned()))
        };
        let key = ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret");
        for endpoint in ["https://otlp.example.com", "http://127.0.0.1:4318", "http://localhost:4318"] {
            assert!(read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint), key]).is_ok(), "{endpoint}");
        }
        let problems = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otlp.example.com"), key]).unwrap_err();
        assert!(problems[0].contains("must be https"), "{problems:?}");
        assert!(!problems.concat().contains("s3cret"), "the value is never quoted");
        let metrics_in_clear = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example.com"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics.example.com/v1/metrics"),
            key,
        ];
        assert!(read(&metrics_in_clear).is_err(), "the metrics endpoint carries them too");
        assert!(
            read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otlp.example.com")]).is_ok(),
            "no headers, no credential"
        );
    }

    /// An endpoint is kept as a URL parser writes it, so every export can be addressed: a space
    /// in the path, or an international host, would otherwise drop each batch unsaid.
    #[test]
    fn endpoints_are_kept_as_addressable_urls() {
        let read = |traces: &'static str| settings(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces)]).traces_endpoint;
        assert_eq!(read("http://127.0.0.1:4318/a b"), "http://127.0.0.1:4318/a%20b");
        assert_eq!(read("https://bücher.example/v1/traces"), "https://xn--bcher-kva.example/v1/traces");
        for endpoint in [&read("http://127.0.0.1:4318/a b"), &settings(&[]).metrics_endpoint.unwrap()] {
            assert!(endpoint.parse::<http::Uri>().is_ok(), "{endpoint}");
        }
        let vars = |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "file:///tmp/x".to_owned());
        assert!(settings_from(&vars).is_err(), "not http(s)");
        // A refusal names the variable that was wrong.
        let refused = |pairs: &[(&str, &str)]| {
            let vars: std::collections::HashMap<&str, &str> = pairs.iter().copied().collect();
            settings_from(&|name| vars.get(name).map(|v| (*v).to_owned())).unwrap_err().join(" ")
        };
        let traces = refused(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "junk"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        ]);
        assert!(traces.starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "{traces}");
        let base = refused(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "junk"),
        ]);
        assert!(base.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT"), "{base}");
    }

    #[test]
    fn the_resource_names_the_instance_and_carries_the_resource_attributes() {
        let plain = settings(&[]);
        let first = resource_of(&plain);
        assert_eq!(first["service.name"], "vercel-mcp");
        let id = &first["service.instance.id"];
        assert_eq!((id.len(), &id[14..15]), (36, "4"), "a UUID v4: {id}");
        assert_ne!(&resource_of(&plain)["service.instance.id"], id, "one per process, random");
        assert!(first.contains_key("telemetry.sdk.name"));

        let configured = settings(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment.name=preview, team=a%2Cb,broken,service.name=from-attributes",
            ),
            ("OTEL_SERVICE_NAME", "from-service-name"),
        ]);
        let resource = resource_of(&configured);
        assert_eq!(resource["deployment.environment.name"], "preview");
        assert_eq!(resource["team"], "a,b", "values are percent-decoded");
        assert_eq!(resource["service.name"], "from-service-name", "OTEL_SERVICE_NAME comes first");
        assert!(resource.contains_key("service.instance.id"));
        let named = settings(&[("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=pod-7,service.name=from-attributes")]);
        let resource = resource_of(&named);
        assert_eq!(
            (resource["service.instance.id"].as_str(), resource["service.name"].as_str()),
            ("pod-7", "from-attributes")
        );
    }
}
