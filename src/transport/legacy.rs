//! The stateless 2025-11-25 path for clients that start with `initialize`.
//!
//! Legacy requests are served by the same registry and handlers, reshaped to 2025 results (no
//! `resultType`, no cache hints, `-32002` for a missing resource). Two 2025 mechanisms need
//! care on a stateless server:
//!
//! * **Sessions.** The server issues an `Mcp-Session-Id`, but it is a sealed token, not a key
//!   into memory: any instance verifies it, none stores it. It carries the capabilities the
//!   client declared at `initialize`, so every later request knows what it may ask of the client.
//!   A forged or expired id gets 404, as 2025-11-25 prescribes for a terminated session. `DELETE`
//!   is 405 (the client cannot end a session the server does not keep).
//! * **Server-to-client requests.** When a handler answers `input_required` (elicitation,
//!   sampling, roots), the legacy client cannot retry with `inputResponses`; instead the server
//!   sends each request on the call's SSE stream and waits for the client to POST the answer.
//!   That correlation lives in this process for the lifetime of the open stream only, keyed by
//!   an unguessable id, and is the one piece of instance memory the legacy path relies on.

use http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

use super::headers;
use super::{App, Body, accepted, error_response, respond_streaming};
use crate::body::StreamEvent;
use crate::body::{FinalResponse, ResponseOutcome};
use crate::protocol::params::RequestParams;
use crate::protocol::{Era, ErrorCode, LEGACY_VERSIONS, McpError, RequestId, jsonrpc};
use crate::security::Principal;
use crate::server::{Reply, RequestContext};
use crate::state::Purpose;

/// How long a legacy session id stays valid.
const SESSION_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// How long the server waits, in all, for a client to answer the requests of one call: at most
/// this, and no longer than a stream may stay open on the function (its listen limit, which ends
/// before the function's `maxDuration`), but never less than [`LEAST_ANSWER_WAIT`].
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
const LEAST_ANSWER_WAIT: Duration = Duration::from_secs(5);
/// How many `input_required` rounds the legacy shim fulfils before giving up.
const MAX_ROUNDS: usize = 8;
/// Binding of session tokens: they are not tied to a principal (the 2025 session is transport
/// state), only to their purpose.
const SESSION_BINDING: &[u8] = b"legacy-session";

/// Whether a request belongs on the legacy path: no modern `_meta` version, and either
/// `initialize` or a legacy (or absent) `MCP-Protocol-Version` header.
pub(super) fn is_legacy(headers: &HeaderMap, method: &str, params: &RequestParams) -> bool {
    // A modern envelope wins even for `initialize`, which 2026-07-28 answers with -32601.
    let has_modern_meta = params.meta().protocol_version.is_some();
    if has_modern_meta {
        return false;
    }
    method == "initialize" || sent_as_legacy(headers)
}

/// The waiting end of one server-to-client request.
type Answer = oneshot::Sender<Result<Value, Value>>;

/// In-flight server-to-client requests of this process, by their (random) JSON-RPC id, each
/// with the principal whose call asked: only that principal may answer it.
#[derive(Default)]
pub(crate) struct PendingClientRequests(Mutex<HashMap<String, (Arc<str>, Answer)>>);

impl PendingClientRequests {
    fn register(
        self: &Arc<Self>,
        principal: &Principal,
    ) -> (String, oneshot::Receiver<Result<Value, Value>>, PendingGuard) {
        let id = format!("srv-{}", random_hex());
        let (tx, rx) = oneshot::channel();
        self.0.lock().expect("pending lock").insert(id.clone(), (Arc::from(principal.id()), tx));
        let guard = PendingGuard { pending: self.clone(), id: id.clone() };
        (id, rx, guard)
    }

    /// The waiting request `id`, if `principal` is the one it asked (another's answer leaves it
    /// waiting).
    fn take_for(&self, id: &str, principal: &Principal) -> Option<Answer> {
        let mut pending = self.0.lock().expect("pending lock");
        if pending.get(id).is_some_and(|(owner, _)| **owner == *principal.id()) {
            return pending.remove(id).map(|(_, answer)| answer);
        }
        None
    }

    fn remove(&self, id: &str) {
        self.0.lock().expect("pending lock").remove(id);
    }
}

/// Removes an entry when its request finishes, whatever the outcome.
struct PendingGuard {
    pending: Arc<PendingClientRequests>,
    id: String,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.pending.remove(&self.id);
    }
}

fn random_hex() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut bytes).expect("the OS random source works");
    crate::state::seal::hex(&bytes)
}

/// The sealed session a 2025-11-25 message names: `Ok(None)` without one, `Err` for one no
/// instance issued or that has expired.
fn open_session(app: &App, headers: &HeaderMap) -> Result<Option<Value>, ()> {
    let Some(session) = headers.get("mcp-session-id") else { return Ok(None) };
    let sealed = session.to_str().map_err(|_| ())?;
    app.sealer.open(Purpose::LegacySession, SESSION_BINDING, sealed).map(Some).map_err(|_| ())
}

fn session_not_found(id: Option<&RequestId>) -> Response<Body> {
    error_response(id, &McpError::new(ErrorCode::INVALID_REQUEST, StatusCode::NOT_FOUND, "Session not found"))
}

/// A notification's answer when it names a session: 2025-11-25 answers every message that names a
/// session no instance issued, or one that expired, with 404, so that its client starts a new one.
/// (A 2026-07-28 message's `Mcp-Session-Id` is ignored, as that revision says.)
pub(super) fn unknown_session(app: &App, headers: &HeaderMap) -> Option<Response<Body>> {
    (sent_as_legacy(headers) && open_session(app, headers).is_err()).then(|| session_not_found(None))
}

/// Whether a message's `MCP-Protocol-Version` is a 2025 one, or absent (2025-03-26's).
fn sent_as_legacy(headers: &HeaderMap) -> bool {
    headers::single(headers, headers::PROTOCOL_VERSION).is_ok_and(|v| v.is_none_or(|v| LEGACY_VERSIONS.contains(&v)))
}

/// A POSTed JSON-RPC response: delivered to the waiting legacy call, if there is one here.
pub(super) fn deliver_client_response(
    app: &App,
    headers: &HeaderMap,
    principal: &Principal,
    id: RequestId,
    outcome: Result<Value, Value>,
) -> Response<Body> {
    if let Some(refused) = unknown_session(app, headers) {
        return refused;
    }
    let waiting = sent_as_legacy(headers)
        .then(|| id.as_value().as_str().and_then(|id| app.pending.take_for(id, principal)))
        .flatten();
    match waiting {
        Some(sender) => {
            let _ = sender.send(outcome);
            accepted()
        }
        None => error_response(
            None,
            &McpError::invalid_request(
                "Invalid Request: clients must not send responses except to a pending server request",
            ),
        ),
    }
}

/// Serves one legacy request.
pub(super) async fn handle(
    app: &Arc<App>,
    headers: &HeaderMap,
    principal: Principal,
    observed: super::Observed,
    id: RequestId,
    method: String,
    params: RequestParams,
) -> Response<Body> {
    let request_id = observed.request_id;
    if let Ok(Some(version)) = headers::single(headers, headers::PROTOCOL_VERSION) {
        if method != "initialize" && !LEGACY_VERSIONS.contains(&version) {
            return error_response(
                Some(&id),
                &McpError::invalid_request(format!("Unsupported MCP-Protocol-Version: {version}")),
            );
        }
    }
    // What the client declared at `initialize`, carried in its sealed session id; a request
    // without one declared nothing.
    let declared = match open_session(app, headers) {
        Ok(session) => session.map(|data| declared_capabilities(data.get("capabilities"))).unwrap_or_default(),
        Err(()) if method != "initialize" => return session_not_found(Some(&id)),
        Err(()) => Map::new(),
    };
    if method == "initialize" {
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let result = app.server.initialize(requested);
        let initialized = FinalResponse {
            status: StatusCode::OK,
            body: jsonrpc::result_response(&id, &result),
            outcome: ResponseOutcome::Ok,
        };
        let mut response = super::json_response(initialized);
        let capabilities = Value::Object(declared_capabilities(params.get("capabilities")));
        let data = json!({ "capabilities": capabilities });
        let session = app.sealer.seal(Purpose::LegacySession, SESSION_BINDING, SESSION_TTL_MS, data);
        if let Ok(value) = HeaderValue::from_str(&session) {
            response.headers_mut().insert("mcp-session-id", value);
        }
        return response;
    }

    if let Some(refusal) = super::scope_refusal(app, &principal, &method, &params) {
        return refusal;
    }
    let mut ctx = RequestContext::new(id, Era::Legacy, principal, app.bus.clone());
    ctx.span = observed.span;
    ctx.client_capabilities = declared;
    ctx.platform_token = super::platform_token(app, headers);
    // One that is not a token the 2025 path honours is ignored, as that path always has: the
    // call runs without progress notifications.
    let honoured = |token: &&Value| match token {
        Value::String(token) => token.len() <= crate::protocol::meta::MAX_PROGRESS_TOKEN_BYTES,
        token => token.is_number(),
    };
    ctx.progress_token = params.meta().progress_token.as_ref().filter(honoured).cloned();

    if !matches!(method.as_str(), "tools/call" | "prompts/get" | "resources/read") {
        return super::json_response(run(app, &request_id, ctx, &method, &params).await);
    }
    let id = ctx.id.clone();
    respond_streaming(app, &request_id, &id, move |outbox, app, request_id| async move {
        ctx.outbox = Some(outbox);
        run(&app, &request_id, ctx, &method, &params).await
    })
    .await
}

/// The client capabilities the server may use, from what a 2025 client declared: `elicitation`
/// (with its `form` and `url` modes; an empty object means form), `sampling` and `roots`, each
/// kept as an empty object. Nothing else is kept, so the sealed session id stays small whatever
/// the client sends.
fn declared_capabilities(declared: Option<&Value>) -> Map<String, Value> {
    let mut kept = Map::new();
    let Some(Value::Object(declared)) = declared else { return kept };
    if let Some(Value::Object(elicitation)) = declared.get("elicitation") {
        let modes: Map<String, Value> = ["form", "url"]
            .into_iter()
            .filter(|mode| elicitation.get(*mode).is_some_and(Value::is_object))
            .map(|mode| (mode.to_owned(), json!({})))
            .collect();
        if elicitation.is_empty() {
            kept.insert("elicitation".into(), json!({ "form": {} }));
        } else if !modes.is_empty() {
            kept.insert("elicitation".into(), Value::Object(modes));
        }
    }
    for name in ["sampling", "roots"] {
        if declared.get(name).is_some_and(Value::is_object) {
            kept.insert(name.into(), json!({}));
        }
    }
    kept
}

async fn run(app: &App, request_id: &str, ctx: RequestContext, method: &str, params: &RequestParams) -> FinalResponse {
    let id = ctx.id.clone();
    match fulfil(app, request_id, ctx, method, params).await {
        Ok((mut result, outcome)) => {
            result.remove("resultType");
            result.remove("ttlMs");
            result.remove("cacheScope");
            FinalResponse {
                status: StatusCode::OK,
                body: jsonrpc::result_response(&id, &Value::Object(result)),
                outcome,
            }
        }
        Err(error) => {
            // 2025-11-25 ties no status to JSON-RPC errors on a POST response; keep the
            // modern statuses only for transport-level failures. A 404 above all: to a client
            // holding a session id it says the session is gone, and the client starts over
            // (and would again, at the next unknown method or resource).
            let mut reply = super::error_reply(Some(&id), &error);
            if matches!(reply.status, StatusCode::INTERNAL_SERVER_ERROR | StatusCode::NOT_FOUND) {
                reply.status = StatusCode::OK;
            }
            reply
        }
    }
}

/// Waits for the client's answer until `by`, or until the process begins stopping (the answer
/// would come as a new request, which a stopping process no longer takes). `None`: no answer by
/// then, or nobody left to answer. (The call's stream carries keep-alives meanwhile, as every
/// call's stream does: a person may take a while to answer, and proxies cut a stream that says
/// nothing. A stream that is gone takes this wait with it.)
async fn answered<T>(
    answer: oneshot::Receiver<T>,
    by: tokio::time::Instant,
    stopping: &crate::state::Stopping,
) -> Option<T> {
    tokio::select! {
        // An answer already here is taken, even if the process began stopping meanwhile.
        biased;
        answer = tokio::time::timeout_at(by, answer) => answer.ok()?.ok(),
        () = stopping.begun() => None,
    }
}

/// Executes the request, answering `input_required` rounds by asking the client over the open
/// stream (the 2025 way) and re-running the handler with the answers.
async fn fulfil(
    app: &App,
    request_id: &str,
    ctx: RequestContext,
    method: &str,
    params: &RequestParams,
) -> Result<(Map<String, Value>, ResponseOutcome), McpError> {
    let mut ctx = ctx;
    let answers_by =
        tokio::time::Instant::now() + CLIENT_ANSWER_TIMEOUT.min(app.listen.max_duration).max(LEAST_ANSWER_WAIT);
    let mut waiting = None;
    for _ in 0..MAX_ROUNDS {
        let next = ctx.fork();
        let input = match super::execute(app, request_id, ctx, method, params).await? {
            Reply::Complete(result) => {
                let outcome = ResponseOutcome::of_tool_result(result.get("isError") == Some(&Value::Bool(true)));
                return Ok((result, outcome));
            }
            Reply::Tool(result) => {
                let outcome = ResponseOutcome::of_tool_result(result.is_error);
                return Ok((result.into_object(), outcome));
            }
            Reply::InvalidArguments(result) => return Ok((result.into_object(), ResponseOutcome::InvalidArguments)),
            Reply::Listing { mut result, key, items } => {
                let items: Value =
                    serde_json::from_str(&items).map_err(|_| McpError::internal("Internal error: listing"))?;
                result.insert(key.into(), items);
                return Ok((result, ResponseOutcome::Ok));
            }
            Reply::InputRequired(input) => input,
        };
        let Some(outbox) = next.outbox.clone() else {
            return Err(McpError::internal("Internal error: input required without a stream"));
        };
        // 2025-11-25: a server must not send a request the client did not declare support for.
        // The call fails instead: a tool with an error result, anything else with an error.
        if let Some((_, request)) = input.requests.iter().find(|(_, r)| !r.capability(&next.client_capabilities).1) {
            let message = format!(
                "This needs the client to support {}, which it did not declare at initialize",
                request.method()
            );
            return match method {
                "tools/call" => Ok((
                    crate::protocol::types::CallToolResult::error(message).into_object(),
                    ResponseOutcome::ToolError,
                )),
                _ => Err(McpError::invalid_request(message)),
            };
        }
        // From its first question, the wait keeps this call's stream open as long as a listen
        // stream, so it holds one of the caller's listen slots until the call ends: one caller
        // cannot hold the instance's connections by leaving many questions unanswered. (A round
        // that asks nothing, only handing back its state, runs on at once and needs none.)
        if waiting.is_none() && !input.requests.is_empty() {
            let principal = next.principal.id();
            waiting = Some(crate::server::listen::listen_slot(&app.listen_slots, principal, app.listen_caps)?);
        }
        let mut responses = Map::new();
        for (key, request) in &input.requests {
            let (request_id, answer, _guard) = app.pending.register(&next.principal);
            let mut params = request.params();
            // 2025-11-25's URL elicitation names itself (2026-07-28 dropped the member): the
            // request's own unguessable id serves.
            if params.get("mode").and_then(Value::as_str) == Some("url") {
                params["elicitationId"] = json!(request_id);
            }
            let message = jsonrpc::request(&request_id, request.method(), params);
            if outbox.send(StreamEvent::ClientRequest { message }).await.is_err() {
                return Err(McpError::internal("Internal error: the client closed the stream"));
            }
            match answered(answer, answers_by, &app.stopping).await {
                Some(Ok(result)) => {
                    responses.insert(key.clone(), result);
                }
                Some(Err(error)) => {
                    let detail = error.get("message").and_then(Value::as_str).unwrap_or("error");
                    return Err(McpError::internal(format!(
                        "The client could not complete {}: {}",
                        request.method(),
                        crate::protocol::error::truncate_for_message(detail)
                    )));
                }
                None if app.stopping.has_begun() => {
                    return Err(McpError::internal(format!(
                        "The server instance is stopping and can no longer take the answer to {}; call the tool again",
                        request.method()
                    )));
                }
                None => {
                    return Err(McpError::internal(format!("The client did not answer {} in time", request.method())));
                }
            }
        }
        ctx = next;
        ctx.input_responses = responses;
        ctx.request_state = input.state;
    }
    Err(McpError::internal("Internal error: too many input rounds"))
}
