//! The Streamable HTTP transport: one POST in, one JSON or SSE response out.
//!
//! [`handle`] works on `http::Request<Bytes>` so it runs the same under `vercel_runtime`, in
//! the local server and in tests without a socket. The order of checks follows the protocol
//! reference, except that Origin comes first (a refused origin learns nothing else): Origin,
//! method, authentication, media type, size, JSON-RPC shape, era switch, then the modern
//! header/`_meta`/version checks, all of which finish before any stream opens.

pub mod auth;
pub mod cors;
pub mod headers;
mod legacy;
mod modern;

pub use crate::body::Body;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::Arc;

use crate::body::{Events, FinalResponse, First, Outbox, Producer, ResponseOutcome};
use crate::observe::RequestRecord;
use crate::protocol::params::RequestParams;
use crate::protocol::{McpError, Message, RequestId, jsonrpc};
use crate::security::{AllowedOrigins, OriginDecision, Principal, Refusal};
use crate::server::McpServer;
use crate::server::listen::ListenLimits;
use crate::state::{ChangeBus, Sealer};
use crate::telemetry::trace_id_from;

/// Everything one MCP endpoint needs, built once per process.
pub struct App {
    pub(crate) server: Arc<McpServer>,
    pub(crate) sealer: Sealer,
    pub(crate) origins: AllowedOrigins,
    pub(crate) bus: Arc<dyn ChangeBus>,
    pub(crate) max_body_bytes: usize,
    pub(crate) listen: ListenLimits,
    pub(crate) listen_caps: crate::server::listen::ListenCaps,
    pub(crate) listen_slots: Arc<crate::security::Slots>,
    pub(crate) stopping: crate::state::Stopping,
    pub(crate) pending: Arc<legacy::PendingClientRequests>,
    pub(crate) auth: crate::security::Authenticator,
    pub(crate) logger: crate::observe::Logger,
    pub(crate) platform: crate::security::PlatformIdentity,
    /// Used `requestState` nonces (single use); `None` when `MCP_REQUEST_STATE_SINGLE_USE=off`.
    pub(crate) request_state_nonces: Option<Arc<dyn crate::state::NonceStore>>,
    pub(crate) telemetry: crate::telemetry::Telemetry,
    /// `trace.mismatch` lines, which any caller can cause, let through once a minute.
    pub(crate) trace_mismatches: crate::observe::Throttle,
}

/// What one endpoint is served with, apart from its registry: chosen by the composition root.
#[derive(Clone)]
pub struct Endpoint {
    /// Seals `requestState` and session ids.
    pub sealer: Sealer,
    /// The Origin allow-list.
    pub origins: AllowedOrigins,
    /// Change signals for listen streams.
    pub bus: Arc<dyn ChangeBus>,
    /// The largest accepted request body.
    pub max_body_bytes: usize,
    /// How long listen streams stay open, and their keep-alive.
    pub listen: ListenLimits,
    /// Open listen streams (and 2025 calls waiting for the client's answer) one caller, and one
    /// instance, may hold.
    pub listen_caps: crate::server::listen::ListenCaps,
    /// Where those streams are counted: shared by every endpoint of the process, so that the
    /// caps are the instance's, not each endpoint's.
    pub listen_slots: Arc<crate::security::Slots>,
    /// The process is stopping: open listen streams end with their result. Shared by every
    /// endpoint of the process.
    pub stopping: crate::state::Stopping,
    /// Who may call, as this endpoint's own protected resource.
    pub auth: crate::security::Authenticator,
    /// Where the request lines go.
    pub logger: crate::observe::Logger,
    /// Which request OIDC tokens name this deployment.
    pub platform: crate::security::PlatformIdentity,
    /// Used `requestState` nonces (single use); `None` when states may be replayed until they
    /// expire.
    pub request_state_nonces: Option<Arc<dyn crate::state::NonceStore>>,
    /// Where request spans go (off unless an OTLP endpoint is configured).
    pub telemetry: crate::telemetry::Telemetry,
}

impl App {
    /// Serves `server` as `endpoint` describes. Tools that declare scopes are enforced whenever
    /// authentication is on, and the endpoint's metadata advertises them.
    pub fn new(mut server: McpServer, endpoint: Endpoint) -> Self {
        server.check_registrations();
        server.scopes_enforced = endpoint.auth.enforces_scopes();
        crate::observe::install_panic_hook();
        Self {
            logger: endpoint.logger,
            auth: endpoint.auth.advertising(&server.scopes_in_use()),
            server: Arc::new(server),
            sealer: endpoint.sealer,
            origins: endpoint.origins,
            bus: endpoint.bus,
            max_body_bytes: endpoint.max_body_bytes,
            listen: endpoint.listen,
            listen_caps: endpoint.listen_caps,
            listen_slots: endpoint.listen_slots,
            stopping: endpoint.stopping,
            pending: Default::default(),
            platform: endpoint.platform,
            request_state_nonces: endpoint.request_state_nonces,
            telemetry: endpoint.telemetry,
            trace_mismatches: Default::default(),
        }
    }

    /// The authenticator (also serves the protected-resource metadata).
    pub fn auth(&self) -> &crate::security::Authenticator {
        &self.auth
    }

    /// The registry served.
    pub fn server(&self) -> &McpServer {
        &self.server
    }

    /// The change bus (tools publish list changes through it).
    pub fn bus(&self) -> &Arc<dyn ChangeBus> {
        &self.bus
    }

    /// The largest accepted body, for edges that buffer the request.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// Where this endpoint's spans go (the edges flush it).
    pub fn telemetry(&self) -> &crate::telemetry::Telemetry {
        &self.telemetry
    }

    /// The signal that the process is stopping (the local run begins it on SIGTERM).
    pub fn stopping(&self) -> &crate::state::Stopping {
        &self.stopping
    }
}

/// Serves one request to the MCP endpoint, and logs one structured line about it (which the
/// logger leaves out for a request that succeeded when it writes failures only).
pub async fn handle(app: &Arc<App>, request: Request<Bytes>) -> Response<Body> {
    answer(app, request, None).await
}

/// [`handle`] for a request whose head was screened ([`screen_head`]): answered by the app that
/// screened it, with the outcome of that authentication (it is not authenticated again, so the
/// answer cannot differ from what the screening decided).
pub async fn handle_screened(request: Request<Bytes>, screened: Screened<'_>) -> Response<Body> {
    answer(screened.app, request, screened.authenticated).await
}

async fn answer(
    app: &Arc<App>,
    request: Request<Bytes>,
    authenticated: Option<Result<Principal, Refusal>>,
) -> Response<Body> {
    let mut record = RequestRecord::start(&app.logger);
    let http_method = method_name(request.method());
    let header_traceparent = app
        .telemetry
        .is_on()
        .then(|| request.headers().get(headers::TRACEPARENT).and_then(|v| v.to_str().ok()).map(str::to_owned))
        .flatten();
    record.trace_id = header_trace_id(request.headers());
    // The Origin check comes first, before the method: a refused origin learns nothing else.
    let mut response = match app.origins.decide(request.headers()) {
        OriginDecision::Refused => plain(StatusCode::FORBIDDEN, crate::security::origin::FORBIDDEN_BODY),
        OriginDecision::Absent if request.method() == Method::OPTIONS => cors::preflight(None, request.headers()),
        OriginDecision::Absent => handle_request(app, request, authenticated, &mut record).await,
        OriginDecision::Allowed(origin) => {
            let origin = origin.clone();
            if request.method() == Method::OPTIONS {
                cors::preflight(Some(&origin), request.headers())
            } else {
                let mut response = handle_request(app, request, authenticated, &mut record).await;
                cors::expose(&mut response, &origin);
                response
            }
        }
    };
    let outcome = outcome_of(&response);
    let stream = response.body().is_stream();
    end_span(app, &mut record, header_traceparent.as_deref(), http_method, response.status(), outcome);
    // With tracing on, the line has its span's trace id by now; off, one of its own.
    if record.trace_id.is_empty() {
        record.trace_id = app.logger.new_trace_id();
    }
    answer_with_request_id(&mut response, &record);
    record.finish(&app.logger, response.status().as_u16(), outcome, stream);
    response
}

/// Logs the line of a request that an edge refused before any endpoint saw it (a body over the
/// limit, one that broke or came too slowly, a path with no route), and returns the refusal with
/// the line's request id. Nothing of the request was read, so the line has its status and
/// outcome and no method, name or principal; it has no span either. Its latency counts from
/// `arrived`: when the edge began to wait for the body (a refusal that waited for nothing passes
/// the present).
///
/// The Origin is decided as the endpoint decides it: a refused one gets the endpoint's 403
/// instead (a present, invalid Origin is refused whatever else is wrong), and an allowed one
/// can read the refusal, its status and request id, instead of seeing a network error.
pub fn refused(
    logger: &crate::observe::Logger,
    origins: &AllowedOrigins,
    head: &http::HeaderMap,
    arrived: std::time::Instant,
    mut response: Response<Body>,
) -> Response<Body> {
    match origins.decide(head) {
        OriginDecision::Refused => response = plain(StatusCode::FORBIDDEN, crate::security::origin::FORBIDDEN_BODY),
        OriginDecision::Allowed(origin) => cors::expose(&mut response, origin),
        OriginDecision::Absent => {}
    }
    logged_refusal(logger, head, arrived, response)
}

/// The line of [`refused`], and the request id on its answer.
fn logged_refusal(
    logger: &crate::observe::Logger,
    head: &http::HeaderMap,
    arrived: std::time::Instant,
    mut response: Response<Body>,
) -> Response<Body> {
    let mut record = RequestRecord::start_at(logger, arrived);
    record.trace_id = header_trace_id(head);
    if record.trace_id.is_empty() {
        record.trace_id = logger.new_trace_id();
    }
    answer_with_request_id(&mut response, &record);
    let outcome = outcome_of(&response);
    record.finish(logger, response.status().as_u16(), outcome, false);
    response
}

/// What a 404 says: where the endpoints are (a client pointed at `/mcp`, say, learns the path).
const NO_ROUTE_BODY: &str =
    "Not Found: the MCP endpoint is /api/mcp, and each example's is /api/examples/<name> (README.md lists them)";

/// 404 for a path, or an example, that nothing serves: [`refused`], so it has its line.
pub fn no_route(logger: &crate::observe::Logger, origins: &AllowedOrigins, head: &http::HeaderMap) -> Response<Body> {
    refused(logger, origins, head, std::time::Instant::now(), plain(StatusCode::NOT_FOUND, NO_ROUTE_BODY))
}

/// The trace id of a `traceparent` header, or empty.
fn header_trace_id(head: &http::HeaderMap) -> String {
    head.get(headers::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(trace_id_from)
        .map(str::to_owned)
        .unwrap_or_default()
}

/// Tells the client the request id its log line carries.
fn answer_with_request_id(response: &mut Response<Body>, record: &RequestRecord) {
    if let Ok(id) = HeaderValue::from_str(&record.request_id) {
        response.headers_mut().insert(headers::REQUEST_ID, id);
    }
}

/// Ends the request's span (starting it now, as of the request's arrival, if the request was
/// refused before its method was known) with the status and outcome.
fn end_span(
    app: &App,
    record: &mut RequestRecord,
    header_traceparent: Option<&str>,
    http_method: &'static str,
    status: StatusCode,
    outcome: ResponseOutcome,
) {
    if !app.telemetry.is_on() {
        return;
    }
    let span = record.span.take().unwrap_or_else(|| {
        app.telemetry.request_span("mcp request".into(), header_traceparent, record.started_at_ms, Vec::new())
    });
    // The line names the span's trace: the caller's when it sent one, else the one the span began.
    if let Some(trace_id) = span.trace_id() {
        record.trace_id = trace_id;
    }
    use opentelemetry::KeyValue;
    span.set([
        KeyValue::new("http.request.method", http_method),
        KeyValue::new("http.response.status_code", i64::from(status.as_u16())),
        KeyValue::new("mcp.outcome", outcome.label()),
    ]);
    if let Some(code) = outcome.code() {
        span.set([KeyValue::new("rpc.jsonrpc.error_code", i64::from(code))]);
    }
    match outcome {
        ResponseOutcome::Ok => {}
        ResponseOutcome::ToolError => span.fail("tool_error"),
        ResponseOutcome::ProtocolError(_) => span.fail("protocol_error"),
        ResponseOutcome::AuthFailure => span.fail("auth_failure"),
        // The client is told to get a credential, or a fresh one: routine, not a failure.
        ResponseOutcome::AuthRequired | ResponseOutcome::TokenExpired => {}
        ResponseOutcome::InvalidArguments => span.fail("invalid_arguments"),
    }
    span.end();
    // Method names are the client's: anything this server does not know is one series.
    let method = match &record.method {
        Some(Cow::Borrowed(known)) => *known,
        _ => "other",
    };
    app.telemetry.record(
        crate::telemetry::OPERATION_DURATION,
        vec![("mcp.method.name", method.into()), ("mcp.outcome", outcome.label().into())],
        record.elapsed(),
    );
}

/// `http.request.method`: the method's name, or `_OTHER` for one HTTP does not define (the
/// semantic conventions' rule; the name is the client's).
fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::POST => "POST",
        Method::GET => "GET",
        Method::OPTIONS => "OPTIONS",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "_OTHER",
    }
}

/// The methods a metric series may be named after (and the request record borrows).
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// What a response says, as its builder tagged it; an untagged response (a 202, a plain-text
/// refusal) is read from its status.
fn outcome_of(response: &Response<Body>) -> ResponseOutcome {
    match response.body().outcome() {
        Some(outcome) => outcome,
        None if response.status().is_success() => ResponseOutcome::Ok,
        None => ResponseOutcome::ProtocolError(None),
    }
}

/// What [`screen_head`] decided of a request's head, for the app that decided it.
pub struct Screened<'a> {
    app: &'a Arc<App>,
    /// The head's authentication, when it got that far (an Origin or a method refused first
    /// needs none).
    authenticated: Option<Result<Principal, Refusal>>,
    needs_body: bool,
}

impl Screened<'_> {
    /// Whether the answer depends on the body: no for a refused Origin, a method other than
    /// `POST`, a missing or invalid credential, or a body that is not JSON, each of which
    /// [`handle_screened`] answers the same with an empty body.
    pub fn needs_body(&self) -> bool {
        self.needs_body
    }
}

/// Decides from a request's head alone whether `app` needs its body ([`Screened::needs_body`]).
/// An edge that waits for bodies itself asks this first, so a caller who may not call cannot
/// make it wait for, and hold, a body; it then answers through [`handle_screened`].
pub async fn screen_head<'a>(app: &'a Arc<App>, head: &http::request::Parts) -> Screened<'a> {
    let headers = &head.headers;
    if matches!(app.origins.decide(headers), OriginDecision::Refused) || head.method != Method::POST {
        return Screened { app, authenticated: None, needs_body: false };
    }
    let authenticated = authenticate(app, headers).await;
    let needs_body = authenticated.is_ok() && headers.get(header::CONTENT_TYPE).is_none_or(is_json);
    Screened { app, authenticated: Some(authenticated), needs_body }
}

/// The caller's principal, or why it is refused. A key fetch during authentication is traced in
/// the caller's trace, beside the request's span.
async fn authenticate(app: &App, headers: &http::HeaderMap) -> Result<Principal, Refusal> {
    let traceparent = || headers.get(headers::TRACEPARENT).and_then(|v| v.to_str().ok());
    app.telemetry.under_caller(traceparent, app.auth.authenticate(headers)).await
}

async fn handle_request(
    app: &Arc<App>,
    request: Request<Bytes>,
    authenticated: Option<Result<Principal, Refusal>>,
    record: &mut RequestRecord,
) -> Response<Body> {
    if request.method() != Method::POST {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed: this endpoint accepts POST only");
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST, OPTIONS"));
        return response;
    }
    let authenticated = match authenticated {
        Some(screened) => screened,
        None => authenticate(app, request.headers()).await,
    };
    let principal = match authenticated {
        Ok(principal) => principal,
        Err(refusal) => return auth::refusal_response(&app.auth, &refusal),
    };
    record.principal = Some(app.logger.principal_digest(principal.id()));
    if let Some(content_type) = request.headers().get(header::CONTENT_TYPE) {
        if !is_json(content_type) {
            let error = McpError::new(
                crate::protocol::ErrorCode::INVALID_REQUEST,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Unsupported Media Type: Content-Type must be application/json",
            );
            return error_response(None, &error);
        }
    }
    if request.body().len() > app.max_body_bytes {
        return body_too_large(app.max_body_bytes);
    }
    let (parts, body) = request.into_parts();
    match Message::parse(&body) {
        Err(refused) => error_response(refused.id.as_ref(), &refused.error),
        Ok(Message::Notification { .. }) => legacy::unknown_session(app, &parts.headers).unwrap_or_else(accepted),
        Ok(Message::Response { id, outcome }) => {
            legacy::deliver_client_response(app, &parts.headers, &principal, id, outcome)
        }
        Ok(Message::Request { id, method, params }) => {
            describe(app, record, &method, &params);
            let span = start_span(app, record, &parts.headers, &id, &method, &params);
            let request_id = record.request_id.clone();
            if legacy::is_legacy(&parts.headers, &method, &params) {
                if let Err(error) = modern::check_sent_headers(&parts.headers, &method, &params) {
                    return error_response(Some(&id), &error);
                }
                record.era = Some("legacy");
                span.set([opentelemetry::KeyValue::new("mcp.protocol.version", crate::protocol::LEGACY_VERSIONS[0])]);
                // Boxed: the fallback era's future is the largest below this one, and held inline
                // it would size every request's future (which the Vercel runtime copies into a box
                // per request) for a path most requests never take.
                Box::pin(legacy::handle(
                    app,
                    &parts.headers,
                    principal,
                    Observed { request_id, span },
                    id,
                    method,
                    params,
                ))
                .await
            } else {
                record.era = Some("modern");
                span.set([opentelemetry::KeyValue::new("mcp.protocol.version", crate::protocol::PROTOCOL_VERSION)]);
                modern::handle(app, &parts.headers, principal, Observed { request_id, span }, id, method, params).await
            }
        }
    }
}

/// Records what a request is about: method, the tool/prompt/resource it names, a keyed digest
/// of its arguments, and the `_meta` trace id when no `traceparent` header came.
fn describe(app: &App, record: &mut RequestRecord, method: &str, params: &RequestParams) {
    record.method = Some(match KNOWN_METHODS.iter().find(|known| **known == method) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(crate::protocol::error::truncate_for_message(method).into_owned()),
    });
    match method {
        "tools/call" | "prompts/get" => {
            let name = params.get("name").and_then(Value::as_str);
            record.name = name.map(|n| crate::protocol::error::truncate_for_message(n).into_owned());
            if let Some(arguments) = params.get("arguments") {
                record.arguments = Some(app.logger.digest_json("arguments", arguments));
            }
        }
        // A URI read through a template carries its arguments (`product://{id}`): the template
        // is named, and the URI is digested like a tool's arguments.
        "resources/read" => {
            if let Some(uri) = params.get("uri") {
                let label = uri.as_str().and_then(|uri| app.server.resource_label(uri));
                record.name = label.map(|l| crate::protocol::error::truncate_for_message(l).into_owned());
                record.arguments = Some(app.logger.digest_json("uri", uri));
            }
        }
        _ => {}
    }
    let from_meta = params.meta().traceparent.as_ref().and_then(Value::as_str).and_then(trace_id_from);
    match from_meta {
        Some(trace) if record.trace_id.is_empty() => record.trace_id = trace.to_owned(),
        // Both came and disagree: the header is trusted (the span's parent and the line's trace
        // are the header's), and an operator is told, since a client or a proxy is confused.
        // Any caller can cause one with every request: one line a minute at most.
        Some(trace)
            if trace != record.trace_id && app.trace_mismatches.due(app.logger.now_ms(), TRACE_MISMATCH_EVERY_MS) =>
        {
            app.logger.event("warn", "trace.mismatch", serde_json::json!({ "requestId": &*record.request_id }));
        }
        _ => {}
    }
}

/// At most one `trace.mismatch` line this often.
pub const TRACE_MISMATCH_EVERY_MS: u64 = 60_000;

/// How a request is followed: its id (in the log and the `x-mcp-request-id` header) and its span.
pub(crate) struct Observed {
    pub request_id: Arc<str>,
    pub span: crate::telemetry::SpanHandle,
}

/// Starts the request's SERVER span, named after the method and its target (`tools/call echo`),
/// under the caller's trace: the `traceparent` header, else `_meta.traceparent`.
fn start_span(
    app: &App,
    record: &mut RequestRecord,
    headers: &http::HeaderMap,
    id: &RequestId,
    method: &str,
    params: &RequestParams,
) -> crate::telemetry::SpanHandle {
    use opentelemetry::KeyValue;
    if !app.telemetry.is_on() {
        return crate::telemetry::SpanHandle::default();
    }
    // As `describe` chooses the line's trace: a malformed header gives way to `_meta`.
    let parent = headers
        .get(headers::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .filter(|t| trace_id_from(t).is_some())
        .or_else(|| params.meta().traceparent.as_ref().and_then(Value::as_str));
    // Trace backends index spans by name and attribute, so only names this server knows go there:
    // a method that does not exist, or a tool or prompt that is not registered, would give each
    // caller a series of its own choosing. (The request's line keeps what the client sent.)
    let method = if KNOWN_METHODS.contains(&method) { method } else { "other" };
    let target = record.name.as_deref().filter(|target| match method {
        "tools/call" => app.server.tool_index.contains_key(*target),
        "prompts/get" => app.server.prompt_index.contains_key(*target),
        // A resource is named only when it is registered (`describe`).
        _ => true,
    });
    let name = match target {
        Some(target) => format!("{method} {target}"),
        None => method.to_owned(),
    };
    // Room for what the request adds later: the version, the status, the outcome, an error.
    let mut attributes = Vec::with_capacity(10);
    attributes.push(KeyValue::new("mcp.method.name", method.to_owned()));
    if let Some(target) = target {
        let key = match method {
            "tools/call" => Some("gen_ai.tool.name"),
            "prompts/get" => Some("gen_ai.prompt.name"),
            // The URI only when it is a registered resource's; a template is not a URI.
            _ => (params.get("uri").and_then(Value::as_str) == Some(target)).then_some("mcp.resource.uri"),
        };
        if let Some(key) = key {
            attributes.push(KeyValue::new(key, target.to_owned()));
        }
    }
    let id = match id.as_value() {
        Value::String(id) => id.clone(),
        other => other.to_string(),
    };
    attributes
        .push(KeyValue::new("jsonrpc.request.id", crate::protocol::error::truncate_for_message(&id).into_owned()));
    let span = app.telemetry.request_span(
        crate::protocol::error::truncate_for_message(&name).into_owned(),
        parent,
        record.started_at_ms,
        attributes,
    );
    record.span = Some(span.clone());
    span
}

/// The 413 sent for an oversized body (also used by edges that stop reading early).
pub fn body_too_large(limit: usize) -> Response<Body> {
    let error = McpError::new(
        crate::protocol::ErrorCode::INVALID_REQUEST,
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("Request body exceeds the limit of {limit} bytes"),
    );
    error_response(None, &error)
}

fn is_json(value: &HeaderValue) -> bool {
    let Ok(value) = value.to_str() else { return false };
    let media_type = value.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/json")
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::full(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn accepted() -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

fn json_response(last: FinalResponse) -> Response<Body> {
    let mut response = Response::new(Body::full(last.body).with_outcome(last.outcome));
    *response.status_mut() = last.status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON-RPC error response, sent with the error's status.
pub(crate) fn error_response(id: Option<&RequestId>, error: &McpError) -> Response<Body> {
    json_response(error_reply(id, error))
}

/// A JSON-RPC error as a final response.
pub(crate) fn error_reply(id: Option<&RequestId>, error: &McpError) -> FinalResponse {
    FinalResponse {
        status: error.status,
        body: jsonrpc::error_response(id, error),
        outcome: ResponseOutcome::ProtocolError(Some(error.code.0)),
    }
}

/// Asks a buffering proxy in front (nginx's convention) to pass each event on as it comes. A
/// constant: named by a `&str`, the name was parsed and checked on every stream.
const X_ACCEL_BUFFERING: http::HeaderName = http::HeaderName::from_static("x-accel-buffering");

fn sse_response(events: Events, producer: Option<Producer>) -> Response<Body> {
    let mut response = Response::new(Body::sse(events, producer));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, no-transform"));
    headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    response
}

/// Runs `work` with a stream outlet (and the app and request id it serves with) until it
/// produces something. If that is the final response,
/// it goes out as plain JSON; if a notification comes first, the response becomes an SSE stream
/// carrying everything in order, and its body goes on polling `work` (see [`crate::body`]), so
/// dropping the response drops the work. A panic in `work` (outside the handler, which
/// [`execute`] already contains) ends the response with `-32603` and a correlation id, as a
/// handler's would: the body is polled by hyper's connection, which must not unwind.
pub(crate) async fn respond_streaming<F>(
    app: &Arc<App>,
    request_id: &Arc<str>,
    id: &RequestId,
    work: impl FnOnce(Outbox, Arc<App>, Arc<str>) -> F,
) -> Response<Body>
where
    F: std::future::Future<Output = FinalResponse> + Send + 'static,
{
    use futures_util::FutureExt;
    let (tx, mut events) = crate::body::outbox::channel(crate::body::STREAM_CAPACITY);
    let (beats, every) = (tx.clone(), app.listen.keep_alive);
    let (app, request_id, id) = (app.clone(), request_id.clone(), id.clone());
    // Combinators, not an `async` block awaiting `work`'s future: that would hold the future
    // twice (captured, and being awaited).
    let work = work(tx.clone(), app.clone(), request_id.clone());
    let work = crate::server::catch_unwind(work).map(move |outcome| {
        let last = outcome.unwrap_or_else(|_| error_reply(Some(&id), &contained_panic(&app, &request_id)));
        let _ = tx.send_final(last);
    });
    let mut producer: Producer = Box::pin(work);
    let mut running = true;
    let first = std::future::poll_fn(|cx| {
        if running && producer.as_mut().poll(cx).is_ready() {
            running = false;
        }
        events.poll_first(cx)
    })
    .await;
    match first {
        First::Response(last) => json_response(last),
        First::Stream => sse_response(events, running.then(|| with_keep_alive(producer, beats, every))),
        // The work always ends by sending its response, and `events` is still here to take it.
        First::Gone => error_response(None, &McpError::internal("Internal error: the handler failed")),
    }
}

/// A streamed response's work, with a keep-alive comment every `every` until it ends: a tool
/// that sent a notification and then works quietly would leave the stream silent, and clients
/// and proxies give up on a silent stream (the wire contract asks for keep-alives on long
/// streams). A response still on its way as JSON gets none: a comment would turn it into a stream.
fn with_keep_alive(mut work: Producer, outbox: Outbox, every: std::time::Duration) -> Producer {
    Box::pin(async move {
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        // A reader that stalled gets one comment when it reads again, not every one it missed.
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = &mut work => return,
                _ = beat.tick() => {
                    // Closed: the response has ended, or its client is gone (the body, and this
                    // work with it, is being dropped).
                    if outbox.send(crate::body::StreamEvent::KeepAlive).await.is_err() {
                        return work.await;
                    }
                }
            }
        }
    })
}

/// Attaches `serverInfo` to a result's `_meta`, keeping any `_meta` the handler set.
pub(crate) fn attach_server_info(result: &mut Map<String, Value>, server: &McpServer) {
    let info = serde_json::to_value(server.info()).expect("server info serialises");
    match result.get_mut("_meta") {
        Some(Value::Object(meta)) => {
            meta.insert(crate::protocol::meta::SERVER_INFO.into(), info);
        }
        _ => {
            let mut meta = Map::new();
            meta.insert(crate::protocol::meta::SERVER_INFO.into(), info);
            result.insert("_meta".into(), Value::Object(meta));
        }
    }
}

/// The platform's OIDC token for this invocation, when the request's copy names this
/// deployment (see [`crate::security::platform`]).
pub(crate) fn platform_token(app: &App, headers: &http::HeaderMap) -> Option<String> {
    app.platform.token_from(headers)
}

/// A 403 `insufficient_scope` for a `tools/call` or `resources/read` whose tool or resource needs
/// scopes the caller's token lacks, decided before anything runs; a 401 naming them for a caller
/// with no token (`optional` mode).
pub(crate) fn scope_refusal(
    app: &App,
    principal: &Principal,
    method: &str,
    params: &RequestParams,
) -> Option<Response<Body>> {
    let required = match method {
        "tools/call" => app.server.missing_tool_scopes(principal, params.get("name")?.as_str()?)?,
        "resources/read" => app.server.missing_resource_scopes(principal, params.get("uri")?.as_str()?)?,
        _ => return None,
    };
    let refusal = if principal.is_verified() {
        crate::security::Refusal::InsufficientScope(required)
    } else {
        crate::security::Refusal::TokenRequired(required)
    };
    Some(auth::refusal_response(&app.auth, &refusal))
}

/// Runs a handler future, turning a panic into `-32603` with a correlation id so one faulty
/// tool cannot take the connection (or, on the streaming path, the stream) down with it. The
/// log gets where it happened; the client gets only the id to quote. A combinator rather than an
/// `async fn`, so the handler's future is stored once (see [`crate::server::catch_unwind`]).
pub(crate) fn catch_panic<'a, T>(
    app: &'a App,
    request_id: &'a str,
    future: impl std::future::Future<Output = Result<T, McpError>> + 'a,
) -> impl std::future::Future<Output = Result<T, McpError>> + 'a {
    use futures_util::FutureExt;
    crate::server::catch_unwind(future).map(move |outcome| match outcome {
        Ok(result) => result,
        Err(_) => Err(contained_panic(app, request_id)),
    })
}

/// Logs a contained panic (where it happened, never its message) and returns the `-32603` the
/// client gets, which carries only the correlation id.
fn contained_panic(app: &App, request_id: &str) -> McpError {
    app.logger.contained_panic("requestId", request_id);
    McpError::internal(format!("Internal error (correlation id {request_id})"))
        .with_data(serde_json::json!({ "correlationId": request_id }))
}

/// Runs a whole route (`served`: the transport, the queue consumer or the sweep), answering a
/// panic that escaped it with 500 and its own line (a `panic` event with where it happened, and
/// the request line) instead of dropping the connection. A handler's panic is contained where it
/// runs, as a JSON-RPC error; this is for the rest. On Vercel a request that never answers holds
/// its invocation until the platform gives up on it, and the runtime never reports it finished.
pub fn answer_panics<'a>(
    logger: &'a crate::observe::Logger,
    served: impl std::future::Future<Output = Response<Body>> + 'a,
) -> impl std::future::Future<Output = Response<Body>> + 'a {
    use futures_util::FutureExt;
    crate::server::catch_unwind(served).map(move |outcome| {
        outcome.unwrap_or_else(|_| {
            let location = crate::observe::take_panic_location();
            logger.event("error", "panic", serde_json::json!({ "location": location }));
            let failed = plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
            logged_refusal(logger, &http::HeaderMap::new(), std::time::Instant::now(), failed)
        })
    })
}

/// Executes a request on the server with panics contained ([`catch_panic`]). The future is boxed
/// behind `dyn`: it is the union of every method's state, and polling it through a pointer keeps
/// the method handlers out of the transport's poll functions, whose stack frames would otherwise
/// grow to tens of KiB per worker thread (measured in `docs/performance.md`).
fn execute<'a>(
    app: &'a App,
    request_id: &'a str,
    ctx: crate::server::RequestContext,
    method: &'a str,
    params: &'a RequestParams,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<crate::server::Reply, McpError>> + Send + 'a>> {
    // Under the request's span, so what serving it calls (a store, an outbound request) is a
    // child of it; nothing when tracing is off.
    let span = ctx.span.clone();
    Box::pin(catch_panic(app, request_id, span.in_context(app.server.execute(ctx, method, params))))
}

/// Reads a request body up to `limit` bytes; a larger body gets 413, a broken one 400. A body
/// that declares more than `limit` (`Content-Length`) is refused before any of it is read, so
/// neither its arrival nor a break in it is waited for. Most bodies come in one chunk, which is
/// returned as it came (no list of chunks to build and drop); trailers are ignored.
pub async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, Response<Body>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    use http_body_util::BodyExt;
    let broken = || error_response(None, &McpError::invalid_request("Invalid Request: the body could not be read"));
    let Some(declared) = usize::try_from(body.size_hint().lower()).ok().filter(|&declared| declared <= limit) else {
        return Err(body_too_large(limit));
    };
    let mut body = std::pin::pin!(body);
    let (mut read, mut first, mut joined) = (0, Bytes::new(), None::<bytes::BytesMut>);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| broken())?.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        if data.len() > limit - read {
            return Err(body_too_large(limit));
        }
        read += data.len();
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut both = bytes::BytesMut::with_capacity(join_capacity(read, declared));
                both.extend_from_slice(&std::mem::take(&mut first));
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(first, bytes::BytesMut::freeze))
}

/// The most a joined body reserves ahead of the bytes that arrived.
const JOIN_RESERVE_MAX: usize = 64 * 1024;

/// Room for a body being joined, `read` bytes of `declared` in: the whole declared body when the
/// rest is within [`JOIN_RESERVE_MAX`], else no more than that ahead of what arrived, so a head that
/// declares a large body and then trickles it in holds buffers for what was sent, not for what
/// was promised (a chunked body, which declares nothing, grows as it comes).
fn join_capacity(read: usize, declared: usize) -> usize {
    read.max(declared.min(read.saturating_add(JOIN_RESERVE_MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};

    type Chunks = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>>;

    /// A panic that escapes a route (outside any handler) is answered 500, with a `panic` line
    /// saying where (not what: its message may carry request data) and the request's line.
    #[tokio::test]
    async fn a_panic_outside_a_handler_is_answered_and_logged() {
        use crate::state::{ManualClock, Sealer, SeededRandom};
        crate::observe::install_panic_hook();
        let clock = Arc::new(ManualClock::new(0));
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock).unwrap();
        let sink = Arc::new(crate::observe::MemorySink::default());
        let logger = crate::observe::Logger::new(sink.clone(), sealer, Arc::new(SeededRandom::new(1)));
        let secret = String::from("secret-argument");
        let response = answer_panics(&logger, async move {
            tokio::task::yield_now().await;
            panic!("failed on {secret}")
        })
        .await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let lines = sink.lines();
        let panic = lines.iter().find(|l| l["event"] == "panic").expect("a panic line");
        assert!(panic["location"].as_str().is_some_and(|l| l.contains("src/transport/mod.rs")), "{panic}");
        let request = lines.iter().find(|l| l["event"] == "request").expect("the request line");
        assert_eq!(request["status"], 500);
        assert!(!sink.raw().concat().contains("secret-argument"), "the message is withheld");
        let fine = answer_panics(&logger, async { plain(StatusCode::OK, "fine") }).await;
        assert_eq!(fine.status(), StatusCode::OK);
    }

    #[test]
    fn a_joined_body_reserves_for_what_arrived_not_what_was_promised() {
        assert_eq!(join_capacity(300, 900), 900, "a small declared body is reserved whole");
        assert_eq!(join_capacity(2, 1 << 20), 2 + JOIN_RESERVE_MAX, "two bytes of a promised MiB");
        assert_eq!(join_capacity(1_000_000, 1 << 20), 1 << 20, "the rest is within reach: reserved whole");
        assert_eq!(join_capacity(500_000, 1 << 20), 500_000 + JOIN_RESERVE_MAX, "grows with what arrives");
        assert_eq!(join_capacity(500, 0), 500, "a chunked body declares nothing");
    }

    /// A body in the given frames, with no declared length (as a chunked request's).
    fn chunks(frames: Vec<Result<Frame<Bytes>, std::io::Error>>) -> Chunks {
        StreamBody::new(futures_util::stream::iter(frames))
    }

    fn data(text: &'static str) -> Result<Frame<Bytes>, std::io::Error> {
        Ok(Frame::data(Bytes::from_static(text.as_bytes())))
    }

    fn read(
        body: impl http_body::Body<Data = Bytes, Error = std::io::Error>,
        limit: usize,
    ) -> Result<Bytes, StatusCode> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(read_body(body, limit)).map_err(|refused| refused.status())
    }

    #[test]
    fn a_body_in_one_chunk_is_returned_as_it_came() {
        let chunk = Bytes::from_static(b"{\"jsonrpc\":\"2.0\"}");
        let read = read(http_body_util::Full::new(chunk.clone()).map_err(|never| match never {}), 64).unwrap();
        assert_eq!(read, chunk);
        assert_eq!(read.as_ptr(), chunk.as_ptr(), "not copied");
    }

    #[test]
    fn chunks_are_joined_in_order_and_trailers_ignored() {
        let trailers = Ok(Frame::trailers(http::HeaderMap::new()));
        let body = chunks(vec![data(""), data("ab"), data(""), data("c"), trailers, data("def")]);
        assert_eq!(read(body, 6).unwrap(), "abcdef");
        // Empty chunks around one chunk leave it as it came.
        let chunk = Bytes::from_static(b"whole");
        let around = chunks(vec![data(""), Ok(Frame::data(chunk.clone())), data("")]);
        assert_eq!(read(around, 6).unwrap().as_ptr(), chunk.as_ptr());
    }

    #[test]
    fn a_body_longer_than_the_limit_is_413_however_it_comes() {
        assert_eq!(read(chunks(vec![data("abc"), data("defg")]), 6), Err(StatusCode::PAYLOAD_TOO_LARGE));
        assert_eq!(read(chunks(vec![data("abcdefg")]), 6), Err(StatusCode::PAYLOAD_TOO_LARGE));
        assert_eq!(read(chunks(vec![data("abc"), data("def")]), 6).unwrap(), "abcdef", "the limit itself is allowed");

        /// Declares its length and must not be read.
        struct Declares(u64);
        impl http_body::Body for Declares {
            type Data = Bytes;
            type Error = std::io::Error;
            fn poll_frame(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
                panic!("a body declared too long was read")
            }
            fn size_hint(&self) -> http_body::SizeHint {
                http_body::SizeHint::with_exact(self.0)
            }
        }
        assert_eq!(read(Declares(7), 6), Err(StatusCode::PAYLOAD_TOO_LARGE));
    }

    #[test]
    fn a_body_that_breaks_is_400() {
        let broken = || Err(std::io::Error::other("connection reset"));
        assert_eq!(read(chunks(vec![data("ab"), broken()]), 64), Err(StatusCode::BAD_REQUEST));
        // Past the limit nothing more is read: the break after it is never seen.
        assert_eq!(read(chunks(vec![data("abcdefg"), broken()]), 6), Err(StatusCode::PAYLOAD_TOO_LARGE));
    }
}
