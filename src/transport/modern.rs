//! The 2026-07-28 path: headers, `_meta` envelope, version, then dispatch.
//!
//! Order of checks (all before any stream opens, so each gets its HTTP status):
//! 1. `MCP-Protocol-Version` present, else `-32020`;
//! 2. `_meta` carries `protocolVersion` and `clientCapabilities`, else 400 `-32602`;
//! 3. the header equals `_meta`'s version, else `-32020`;
//! 4. the version is supported, else `-32022`;
//! 5. `Mcp-Method` and, where required, `Mcp-Name` present and equal to the body, else `-32020`;
//! 6. `logLevel` valid, else `-32602`;
//! 7. for `tools/call`, the `Mcp-Param-*` headers mirror the `x-mcp-header` arguments;
//! 8. for MRTR retries, `requestState` verifies, else `-32602` before the handler runs.

use http::{HeaderMap, HeaderName, Response, StatusCode};
use serde_json::{Map, Value};
use std::sync::Arc;

use super::headers::{self, HeaderProblem};
use super::{App, Body, attach_server_info, error_response, respond_streaming};
use crate::body::{FinalResponse, ResponseOutcome};
use crate::protocol::params::RequestParams;
use crate::protocol::types::CallToolResult;
use crate::protocol::{Era, LogLevel, McpError, RequestId, SUPPORTED_VERSIONS, jsonrpc, meta};
use crate::security::Principal;
use crate::server::{McpServer, Reply, RequestContext, mrtr};

/// Serves one modern request.
pub(super) async fn handle(
    app: &Arc<App>,
    headers: &HeaderMap,
    principal: Principal,
    observed: super::Observed,
    id: RequestId,
    method: String,
    mut params: RequestParams,
) -> Response<Body> {
    let request_id = observed.request_id;
    let envelope = match check(app, headers, &method, &mut params) {
        Ok(envelope) => envelope,
        Err(error) => return error_response(Some(&id), &error),
    };
    if let Some(refusal) = super::scope_refusal(app, &principal, &method, &params) {
        return refusal;
    }
    let mut ctx = RequestContext::new(id.clone(), Era::Modern, principal, app.bus.clone());
    ctx.span = observed.span;
    ctx.client_capabilities = envelope.client_capabilities;
    ctx.log_level = envelope.log_level;
    ctx.progress_token = envelope.progress_token;
    ctx.platform_token = super::platform_token(app, headers);

    if mrtr::supports_mrtr(&method) {
        match mrtr::open_retry(&app.sealer, app.auth.config().resource.url(), &ctx.principal, &method, &params) {
            Ok((responses, state)) => {
                if let (Some(nonces), Some(opened)) = (&app.request_state_nonces, &state) {
                    // A state without a nonce (sealed before states were single use) could be
                    // replayed until it expires: refused while single use is on.
                    let Some(nonce) = opened.nonce.as_deref() else {
                        return error_response(Some(&id), &mrtr::state_error(crate::state::SealError::Malformed));
                    };
                    let consumed = nonces.consume(nonce, app.sealer.clock().now_ms(), mrtr::NONCE_KEPT_MS);
                    match ctx.span.in_context(consumed).await {
                        Ok(true) => {}
                        Ok(false) => return error_response(Some(&id), &mrtr::state_used()),
                        Err(problem) => {
                            // The store may have recorded the use and lost only its reply: then a
                            // retry with this state reads as used, and the call must start over.
                            let message = app.logger.fault("state.fault", "request_state.consume", &problem);
                            let message = format!(
                                "{message}; the requestState may count as used now: if a retry says so, start the call again without it"
                            );
                            return error_response(Some(&id), &McpError::internal(message));
                        }
                    }
                }
                ctx.input_responses = responses;
                ctx.request_state = state.map(|s| s.state);
            }
            Err(error) => return error_response(Some(&id), &error),
        }
    }

    if method == "subscriptions/listen" {
        if let Some(reason) = app.bus.unavailable() {
            return error_response(Some(&id), &McpError::internal(reason.to_owned()));
        }
        let filter = match app.server.listen_filter(&ctx, &params) {
            Ok(filter) => filter,
            Err(error) => return error_response(Some(&id), &error),
        };
        let slot = match crate::server::listen::listen_slot(&app.listen_slots, ctx.principal.id(), app.listen_caps) {
            Ok(slot) => slot,
            Err(error) => return error_response(Some(&id), &error),
        };
        return respond_streaming(app, &request_id, &id, move |outbox, app, _| async move {
            // Held for as long as the stream's work lives: its end, or the response being
            // dropped, frees the slot.
            let _slot = slot;
            ctx.outbox = Some(outbox);
            let limits = app.listen.within(app.auth.credential_remaining(&ctx.principal));
            let body = match app.server.listen(&ctx, filter, limits, &app.stopping).await {
                Some(mut result) => finish(&app.server, &ctx.id, &mut result),
                // The outlet closed: nothing to send.
                None => Vec::new(),
            };
            FinalResponse { status: StatusCode::OK, body, outcome: ResponseOutcome::Ok }
        })
        .await;
    }

    let streams = ctx.progress_token.is_some() || ctx.log_level.is_some();
    if !streams {
        return super::json_response(run(app, &request_id, ctx, &method, &params).await);
    }
    respond_streaming(app, &request_id, &id, move |outbox, app, request_id| async move {
        ctx.outbox = Some(outbox);
        run(&app, &request_id, ctx, &method, &params).await
    })
    .await
}

/// Executes the request and serialises its response.
async fn run(app: &App, request_id: &str, ctx: RequestContext, method: &str, params: &RequestParams) -> FinalResponse {
    let id = ctx.id.clone();
    let principal = ctx.principal.clone();
    let capabilities = ctx.client_capabilities.clone();
    let outcome = match super::execute(app, request_id, ctx, method, params).await {
        Ok(Reply::Complete(mut result)) => {
            let said = ResponseOutcome::of_tool_result(result.get("isError") == Some(&Value::Bool(true)));
            Ok((finish(&app.server, &id, &mut result), said))
        }
        Ok(Reply::Tool(result)) => {
            Ok((finish_tool(&app.server, &id, &result), ResponseOutcome::of_tool_result(result.is_error)))
        }
        Ok(Reply::InvalidArguments(result)) => {
            Ok((finish_tool(&app.server, &id, &result), ResponseOutcome::InvalidArguments))
        }
        Ok(Reply::Listing { mut result, key, items }) => {
            Ok((finish_with(&app.server, &id, &mut result, Some((key, &items))), ResponseOutcome::Ok))
        }
        Ok(Reply::InputRequired(input)) => mrtr::input_required_result(
            &app.sealer,
            app.auth.config().resource.url(),
            &principal,
            method,
            params,
            &capabilities,
            input,
        )
        .map(|mut result| {
            attach_server_info(&mut result, &app.server);
            (jsonrpc::result_response(&id, &Value::Object(result)), ResponseOutcome::Ok)
        }),
        Err(error) => Err(error),
    };
    match outcome {
        Ok((body, outcome)) => FinalResponse { status: StatusCode::OK, body, outcome },
        Err(error) => super::error_reply(Some(&id), &error),
    }
}

/// Stamps `resultType` and `serverInfo` and serialises a complete result.
fn finish(server: &McpServer, id: &RequestId, result: &mut Map<String, Value>) -> Vec<u8> {
    finish_with(server, id, result, None)
}

/// Serialises a finished tool call straight from its type (no intermediate `Value`).
fn finish_tool(server: &McpServer, id: &RequestId, result: &CallToolResult) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + server.meta_json.len());
    jsonrpc::begin_result(&mut out, id);
    serde_json::to_writer(&mut out, result).expect("tool results serialise");
    // The result object always has `content`, so it ends `...}`: the fixed members go before
    // that brace rather than after its opening one, which would mean moving the whole text.
    debug_assert_eq!(out.last(), Some(&b'}'));
    out.pop();
    out.extend_from_slice(b",\"resultType\":\"complete\",\"_meta\":");
    out.extend_from_slice(server.meta_json.as_bytes());
    out.extend_from_slice(b"}}");
    out
}

/// Serialises a complete result, splicing in the parts that never change (`resultType`,
/// the pre-serialised `serverInfo`) and pre-serialised list items instead of rebuilding them.
fn finish_with(
    server: &McpServer,
    id: &RequestId,
    result: &mut Map<String, Value>,
    items: Option<(&str, &str)>,
) -> Vec<u8> {
    let has_meta = result.contains_key("_meta");
    if has_meta {
        attach_server_info(result, server);
    }
    // Room for the envelope, the spliced parts and a small result: one allocation for a listing.
    let spliced = server.meta_json.len() + items.map_or(0, |(key, items)| key.len() + items.len());
    let mut out = Vec::with_capacity(256 + spliced);
    jsonrpc::begin_result(&mut out, id);
    out.push(b'{');
    let mut first = true;
    let mut field = |out: &mut Vec<u8>, bytes: &[&[u8]]| {
        if !first {
            out.push(b',');
        }
        first = false;
        bytes.iter().for_each(|b| out.extend_from_slice(b));
    };
    if !result.contains_key("resultType") {
        field(&mut out, &[b"\"resultType\":\"complete\""]);
    }
    if !has_meta {
        field(&mut out, &[b"\"_meta\":", server.meta_json.as_bytes()]);
    }
    if let Some((key, items)) = items {
        field(&mut out, &[b"\"", key.as_bytes(), b"\":", items.as_bytes()]);
    }
    // The result's own members, written as `serde_json` writes a map (in its order, compact).
    for (key, value) in result.iter() {
        field(&mut out, &[]);
        serde_json::to_writer(&mut out, key).expect("keys serialise");
        out.push(b':');
        serde_json::to_writer(&mut out, value).expect("values serialise");
    }
    out.extend_from_slice(b"}}");
    out
}

/// What the envelope told us about the request.
struct Envelope {
    client_capabilities: Map<String, Value>,
    log_level: Option<LogLevel>,
    progress_token: Option<Value>,
}

fn header_error(name: &str, problem: HeaderProblem) -> McpError {
    match problem {
        HeaderProblem::Repeated => {
            McpError::header_mismatch(format!("Header mismatch: {name} header appears more than once"))
        }
        HeaderProblem::Invalid => {
            McpError::header_mismatch(format!("Header mismatch: {name} header value is not valid"))
        }
    }
}

fn check(app: &App, headers: &HeaderMap, method: &str, params: &mut RequestParams) -> Result<Envelope, McpError> {
    let header_version = headers::single(headers, headers::PROTOCOL_VERSION)
        .map_err(|p| header_error("MCP-Protocol-Version", p))?
        .ok_or_else(|| McpError::header_mismatch("Header mismatch: missing required MCP-Protocol-Version header"))?;

    // Moved into the request's context: nothing reads them from the params again. (`_meta` that
    // is absent or not an object holds neither member.)
    let client_capabilities = params.take_client_capabilities();
    let body_version = match &params.meta().protocol_version {
        Some(Value::String(v)) => v.as_str(),
        _ => return Err(McpError::missing_meta(meta::PROTOCOL_VERSION)),
    };
    let client_capabilities = match client_capabilities {
        Some(Value::Object(capabilities)) => capabilities,
        _ => return Err(McpError::missing_meta(meta::CLIENT_CAPABILITIES)),
    };
    if header_version != body_version {
        return Err(McpError::header_mismatch(format!(
            "Header mismatch: MCP-Protocol-Version header value '{}' does not match body value '{}'",
            crate::protocol::error::truncate_for_message(header_version),
            crate::protocol::error::truncate_for_message(body_version)
        )));
    }
    if !SUPPORTED_VERSIONS.contains(&body_version) {
        return Err(McpError::unsupported_version(body_version));
    }

    check_routing_headers(headers, method, params, Routing::Required)?;

    let meta = params.meta();
    let log_level = match &meta.log_level {
        None | Some(Value::Null) => None,
        Some(Value::String(level)) => Some(LogLevel::parse(level).ok_or_else(invalid_log_level)?),
        Some(_) => return Err(invalid_log_level()),
    };
    let progress_token = match &meta.progress_token {
        None | Some(Value::Null) => None,
        Some(Value::String(token)) if token.len() > meta::MAX_PROGRESS_TOKEN_BYTES => {
            return Err(McpError::invalid_params(format!(
                "progressToken is at most {} bytes",
                meta::MAX_PROGRESS_TOKEN_BYTES
            )));
        }
        Some(token @ Value::String(_)) => Some(token.clone()),
        Some(token @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(token.clone()),
        Some(_) => return Err(McpError::invalid_params("progressToken must be a string or an integer")),
    };

    if method == "tools/call" {
        check_param_headers(&app.server, headers, params)?;
    }
    Ok(Envelope { client_capabilities, log_level, progress_token })
}

/// The member of `method`'s params that `Mcp-Name` mirrors, if it has one.
fn name_source(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// On the 2025-11-25 path, which does not require them: `Mcp-Method` and `Mcp-Name`, when a
/// client sends them (SDKs that speak both revisions do), must equal the body as on the modern
/// path; otherwise a gateway routing on the header would read one method or tool while another
/// ran. `-32020`, HTTP 400.
pub(super) fn check_sent_headers(headers: &HeaderMap, method: &str, params: &RequestParams) -> Result<(), McpError> {
    check_routing_headers(headers, method, params, Routing::IfSent)
}

/// Whether `Mcp-Method` and `Mcp-Name` must be sent (2026-07-28) or are compared only when sent
/// (the 2025-11-25 path).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Routing {
    Required,
    IfSent,
}

/// `Mcp-Method` equals the body's method, and `Mcp-Name` the target the method names (a method
/// that names none has no `Mcp-Name` to check). `-32020`; on the modern path, a target that is
/// not a string is `-32602`.
fn check_routing_headers(
    headers: &HeaderMap,
    method: &str,
    params: &RequestParams,
    routing: Routing,
) -> Result<(), McpError> {
    // Plain: the base64 sentinel is for `Mcp-Name` and `Mcp-Param-*` (values a client may not be
    // able to send as visible ASCII). An encoded method would match here while a gateway that
    // routes on the header saw something else.
    if routing == Routing::Required || headers.contains_key(headers::METHOD) {
        check_header_equals(headers, headers::METHOD, "Mcp-Method", Some(method), Sentinel::Literal)?;
    }
    let Some(field) = name_source(method) else { return Ok(()) };
    if routing == Routing::IfSent && !headers.contains_key(headers::NAME) {
        return Ok(());
    }
    let body_name = match params.get(field) {
        Some(Value::String(body_name)) => body_name.as_str(),
        _ if routing == Routing::Required => {
            return Err(McpError::invalid_params(format!("{method} requires a string {field}")));
        }
        // A sent header names something; a body that names nothing cannot match it.
        _ => "",
    };
    check_header_equals(headers, headers::NAME, "Mcp-Name", Some(body_name), Sentinel::Decoded)
}

fn invalid_log_level() -> McpError {
    McpError::invalid_params(
        "Invalid io.modelcontextprotocol/logLevel: expected one of debug, info, notice, warning, error, critical, alert, emergency",
    )
}

/// How a header's value is read before it is compared with the body.
#[derive(Clone, Copy)]
enum Sentinel {
    /// The `=?base64?…?=` form is decoded (`Mcp-Name`, `Mcp-Param-*`).
    Decoded,
    /// Taken as it is: the sentinel is just text, which matches no body value that needs it.
    Literal,
}

/// Requires header `name` to be present and equal to `expected` (read as `sentinel` says).
fn check_header_equals(
    headers: &HeaderMap,
    name: HeaderName,
    display: &str,
    expected: Option<&str>,
    sentinel: Sentinel,
) -> Result<(), McpError> {
    let Some(expected) = expected else { return Ok(()) };
    let raw = headers::single(headers, name)
        .map_err(|p| header_error(display, p))?
        .ok_or_else(|| McpError::header_mismatch(format!("Header mismatch: missing required {display} header")))?;
    let decoded = match sentinel {
        Sentinel::Decoded => headers::decode_value(raw).map_err(|p| header_error(display, p))?,
        Sentinel::Literal => std::borrow::Cow::Borrowed(raw),
    };
    if decoded != expected {
        return Err(McpError::header_mismatch(format!(
            "Header mismatch: {display} header value '{}' does not match body value '{}'",
            crate::protocol::error::truncate_for_message(&decoded),
            crate::protocol::error::truncate_for_message(expected)
        )));
    }
    Ok(())
}

/// Every `x-mcp-header` argument present (and not null) in the body must arrive as a matching
/// `Mcp-Param-*` header. Unknown tools are left to dispatch (`-32602`).
fn check_param_headers(server: &McpServer, headers: &HeaderMap, params: &RequestParams) -> Result<(), McpError> {
    let Some(tool) =
        params.get("name").and_then(Value::as_str).and_then(|n| server.tool_index.get(n)).map(|&i| &server.tools[i])
    else {
        return Ok(());
    };
    if tool.header_params.is_empty() {
        return Ok(());
    }
    let arguments = params.get("arguments");
    for param in &tool.header_params {
        let header_name = format!("{}{}", headers::PARAM_PREFIX, param.header.to_ascii_lowercase());
        let display = format!("Mcp-Param-{}", param.header);
        let body_value = arguments.and_then(|a| param.value_in(a)).filter(|v| !v.is_null());
        let raw = headers::single(headers, &header_name).map_err(|p| header_error(&display, p))?;
        match (body_value, raw) {
            (None, _) => {}
            (Some(_), None) => {
                return Err(McpError::header_mismatch(format!("Header mismatch: missing required {display} header")));
            }
            (Some(value), Some(raw)) => {
                let decoded = headers::decode_value(raw).map_err(|p| header_error(&display, p))?;
                if !headers::param_matches(&decoded, value) {
                    return Err(McpError::header_mismatch(format!(
                        "Header mismatch: {display} header value does not match argument {}",
                        param.property()
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::Parts;
    use crate::state::SystemClock;
    use http::HeaderValue;
    use serde_json::json;

    fn app() -> App {
        let mut server = McpServer::new("t", "1");
        crate::catalogue::minimal::register(&mut server);
        App::new(server, Parts::for_tests(Arc::new(SystemClock)).endpoint())
    }

    fn headers(method: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(headers::PROTOCOL_VERSION, HeaderValue::from_static("2026-07-28"));
        headers.insert(headers::METHOD, HeaderValue::from_str(method).unwrap());
        headers
    }

    fn params(meta: Value) -> RequestParams {
        RequestParams::from(json!({ "_meta": meta }).as_object().unwrap().clone())
    }

    fn code(meta: Value) -> Option<(i32, StatusCode)> {
        check(&app(), &headers("tools/list"), "tools/list", &mut params(meta)).err().map(|e| (e.code.0, e.status))
    }

    /// A finished result is the JSON-RPC envelope around one object: the result's own members
    /// (escaped as JSON), `resultType` unless the result set it, the server's `_meta` and the
    /// spliced list, each once, whatever the result holds.
    #[test]
    fn a_finished_result_holds_its_members_and_the_spliced_parts() {
        let app = app();
        let meta: Value = serde_json::from_str(&app.server.meta_json).unwrap();
        let cases = [
            (json!({}), None),
            (json!({}), Some(("tools", "[]"))),
            (json!({"nextCursor": "a\"b\\", "n": [1, {"x": null}]}), Some(("tools", r#"[{"name":"t"}]"#))),
            (json!({"resultType": "incomplete", "é\u{1}": "\n"}), None),
            (json!({"_meta": {"k": 1}, "resultType": "complete"}), None),
            (json!({"_meta": {"k": 1}}), Some(("tools", "[]"))),
        ];
        for (result, items) in cases {
            let mut map = result.as_object().unwrap().clone();
            let id = RequestId::from_value(json!("r\"1")).unwrap();
            let bytes = finish_with(&app.server, &id, &mut map, items);
            let text = String::from_utf8(bytes).unwrap();
            let mut expected = result.as_object().unwrap().clone();
            expected.entry("resultType").or_insert(json!("complete"));
            // A result's own `_meta` keeps its members and gains the server's.
            let mut expected_meta = match result.get("_meta") {
                Some(Value::Object(own)) => own.clone(),
                _ => Map::new(),
            };
            expected_meta.extend(meta.as_object().unwrap().clone());
            expected.insert("_meta".into(), Value::Object(expected_meta));
            if let Some((key, items)) = items {
                expected.insert(key.into(), serde_json::from_str(items).unwrap());
            }
            let parsed: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert_eq!(parsed, json!({"jsonrpc": "2.0", "id": "r\"1", "result": expected}), "{text}");
            assert_eq!(text.matches("\"resultType\"").count(), 1, "{text}");
        }
    }

    /// What runs around a streaming handler (serialising its result, a listen loop) is polled by
    /// the response, not by a task: a panic there ends the response with `-32603` and the
    /// correlation id, before the head (as JSON) or after it (as the stream's last event).
    #[tokio::test]
    async fn a_panic_in_a_streams_work_ends_its_response_with_an_internal_error() {
        let app = Arc::new(app());
        let request_id: Arc<str> = Arc::from("r-9");
        let id = RequestId::from_value(json!(9)).unwrap();
        let before_head = super::super::respond_streaming(&app, &request_id, &id, |_outbox, _, _| async move {
            panic!("around the handler");
        })
        .await;
        assert_eq!(before_head.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let reply: Value = serde_json::from_slice(&before_head.into_body().collect().await).unwrap();
        assert_eq!((reply["id"].clone(), reply["error"]["code"].clone()), (json!(9), json!(-32603)));
        assert_eq!(reply["error"]["data"]["correlationId"], "r-9");

        let after_head = super::super::respond_streaming(&app, &request_id, &id, |outbox, _, _| async move {
            let first = crate::protocol::jsonrpc::notification("notifications/progress", &json!({"progress": 1}));
            outbox.send(crate::body::StreamEvent::Notification(first)).await.unwrap();
            tokio::task::yield_now().await;
            panic!("around the handler, later");
        })
        .await;
        assert!(after_head.body().is_stream());
        let streamed = String::from_utf8(after_head.into_body().collect().await.to_vec()).unwrap();
        let events: Vec<Value> = streamed
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(events.len(), 2, "{streamed}");
        assert_eq!(events[0]["method"], "notifications/progress");
        assert_eq!((events[1]["id"].clone(), events[1]["error"]["code"].clone()), (json!(9), json!(-32603)));
        assert_eq!(events[1]["error"]["data"]["correlationId"], "r-9");
    }

    #[tokio::test]
    async fn panic_containment_holds_the_handler_future_once() {
        // An `async fn` wrapper awaiting its future argument would hold the argument and the
        // awaited value side by side, doubling every handler future on the request path.
        let app = app();
        let handler = async {
            let block = [7u8; 4096];
            tokio::task::yield_now().await;
            Ok::<_, McpError>(block.iter().map(|&b| usize::from(b)).sum::<usize>())
        };
        let alone = std::mem::size_of_val(&handler);
        let guarded = super::super::catch_panic(&app, "r-1", handler);
        let size = std::mem::size_of_val(&guarded);
        assert!(size < alone + 256, "guarded {size} bytes for a {alone}-byte handler future");
        assert_eq!(guarded.await.unwrap(), 7 * 4096);
    }

    #[test]
    fn meta_requires_version_and_capabilities_of_the_right_types() {
        let version = "io.modelcontextprotocol/protocolVersion";
        let caps = "io.modelcontextprotocol/clientCapabilities";
        let bad = (-32602, StatusCode::BAD_REQUEST);
        assert_eq!(code(json!(null)), Some(bad));
        assert_eq!(code(json!([])), Some(bad));
        assert_eq!(code(json!({ caps: {} })), Some(bad));
        assert_eq!(code(json!({ version: 20260728, caps: {} })), Some(bad));
        assert_eq!(code(json!({ version: "2026-07-28" })), Some(bad));
        assert_eq!(code(json!({ version: "2026-07-28", caps: [] })), Some(bad));
        assert_eq!(code(json!({ version: "2026-07-28", caps: {} })), None, "clientInfo is optional");
        assert_eq!(
            code(json!({ version: "2026-07-28", caps: {}, "io.modelcontextprotocol/logLevel": 3 })),
            Some((-32602, StatusCode::OK))
        );
        assert_eq!(
            code(json!({ version: "2026-07-28", caps: {}, "progressToken": {"x": 1} })),
            Some((-32602, StatusCode::OK))
        );
        let longest = "p".repeat(crate::protocol::meta::MAX_PROGRESS_TOKEN_BYTES);
        assert_eq!(code(json!({ version: "2026-07-28", caps: {}, "progressToken": longest })), None);
        assert_eq!(
            code(json!({ version: "2026-07-28", caps: {}, "progressToken": format!("{longest}p") })),
            Some((-32602, StatusCode::OK)),
            "a token longer than the cap, which every progress notification would repeat"
        );
        let envelope = check(
            &app(),
            &headers("tools/list"),
            "tools/list",
            &mut params(json!({ version: "2026-07-28", caps: {"sampling": {}}, "progressToken": 7, "io.modelcontextprotocol/logLevel": "warning" })),
        )
        .unwrap();
        assert!(envelope.client_capabilities.contains_key("sampling"));
        assert_eq!(envelope.progress_token, Some(json!(7)));
        assert_eq!(envelope.log_level, Some(LogLevel::Warning));
    }
}
