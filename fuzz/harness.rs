//! What each fuzz target checks, shared with `tests/it/fuzz_regressions.rs`, which replays every
//! saved input under `fuzz/regressions/<target>/` as an ordinary test. Each function panics
//! only when a property is broken; libFuzzer reports that panic as a crash.

use bytes::Bytes;
use serde_json::{Value, json};
use std::sync::{Arc, LazyLock};

use vercel_mcp::jobs::handle;
use vercel_mcp::jobs::queue::JobMessage;
use vercel_mcp::observe::LogSink;
use vercel_mcp::state::{ManualClock, Purpose, Sealer};
use vercel_mcp::transport::headers::{decode_value, encode_value};
use vercel_mcp::{App, McpServer, Parts};

struct Discard;

impl LogSink for Discard {
    fn emit(&self, _line: String) {}
}

const NOW: u64 = 1_800_000_000_000;

/// The combined catalogue on a fixed clock, logging nowhere: a fresh one for every input, so
/// no input depends on what an earlier one left behind (a full job cap, a used nonce).
pub fn fresh_app() -> Arc<App> {
    let mut config = Parts::for_tests(Arc::new(ManualClock::new(NOW)));
    config.log_sink = Arc::new(Discard);
    let mut server = McpServer::new("fuzz", "0.0.0");
    vercel_mcp::catalogue::register_all(&mut server, &config.services());
    Arc::new(App::new(server, config.endpoint()))
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> =
    LazyLock::new(|| tokio::runtime::Builder::new_current_thread().build().expect("a runtime"));

fn sealer() -> Sealer {
    Sealer::new(vec![("k1".into(), vec![7; 32])], Arc::new(ManualClock::new(NOW))).expect("a valid key")
}

/// Sends one request through the whole pipeline and returns the status and, unless the answer
/// is a stream (a listen stream would never end), the body. A 5xx for client input is a
/// defect, and so is a JSON answer that is not one JSON-RPC message with a result or an error.
fn send(app: &Arc<App>, request: http::Request<Bytes>) -> (u16, Option<String>) {
    let response = RUNTIME.block_on(vercel_mcp::transport::handle(app, request));
    let status = response.status().as_u16();
    assert!(status < 500, "server error {status} for client input");
    if response.body().is_stream() {
        return (status, None);
    }
    let json = response.headers().get("content-type").is_some_and(|c| c.as_bytes().starts_with(b"application/json"));
    let body = RUNTIME.block_on(http_body_util::BodyExt::collect(response.into_body())).expect("a body").to_bytes();
    let text = String::from_utf8(body.to_vec()).expect("answers are UTF-8");
    if json && !text.is_empty() {
        let message: Value = serde_json::from_str(&text).expect("a JSON answer parses");
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {text}");
        let (result, error) = (message.get("result"), message.get("error"));
        assert!(result.is_some() != error.is_some(), "exactly one of result and error: {text}");
        if let Some(error) = error {
            assert!(error["code"].is_i64() && error["message"].is_string(), "a malformed error: {text}");
        }
    }
    (status, Some(text))
}

/// Headers (`name: value` lines up to a blank line) and a body, POSTed to `/api/mcp`.
pub fn request_pipeline(data: &[u8]) {
    let split = data.windows(2).position(|w| w == b"\n\n");
    let (head, body) = match split {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (&[][..], data),
    };
    let mut builder = http::Request::post("/api/mcp");
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
            builder = builder.header(name, value);
        }
    }
    if let Ok(request) = builder.body(Bytes::copy_from_slice(body)) {
        send(&fresh_app(), request);
    }
}

/// Any text decodes without panicking; encoding any text yields a header-safe value that
/// decodes back to it.
pub fn header_value(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = decode_value(text);
    let encoded = encode_value(text);
    assert!(http::HeaderValue::from_str(&encoded).is_ok(), "not a header value: {encoded:?}");
    assert_eq!(decode_value(&encoded).expect("own encoding decodes"), text);
}

/// A 2026-07-28 POST of `method` with `params`, every header set as a conforming client would.
fn modern_request(method: &str, name: Option<&str>, params: Value) -> http::Request<Bytes> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut builder = http::Request::post("/api/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        builder = builder.header("mcp-name", name);
    }
    builder.body(Bytes::from(body.to_string())).expect("a request")
}

/// A `tools/list` whose `_meta` is the input (as JSON when it parses, else as a string).
pub fn meta(data: &[u8]) {
    let meta: Value =
        serde_json::from_slice(data).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(data).into()));
    send(&fresh_app(), modern_request("tools/list", None, json!({"_meta": meta})));
}

/// `book_meeting` with an approving answer and `request_state` (none: the first round); returns
/// the response body. Only a genuine sealed state from the first round may lead to a booking.
pub fn book_meeting(app: &Arc<App>, request_state: Option<&str>) -> String {
    let mut params = json!({
        "name": "book_meeting", "arguments": {"topic": "Q3 roadmap"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    if let Some(state) = request_state {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({"confirm": {"action": "accept", "content": {"approved": true}}});
    }
    send(app, modern_request("tools/call", Some("book_meeting"), params)).1.expect("a JSON answer")
}

/// `genuine` (`<version>.<kid>.<payload>.<tag>`) with its key id and tag taken from `data`, its
/// version and payload kept: the expiry is right and it is presented by the caller it was sealed
/// for, so only the MAC stands between the input and an opened envelope. Returns the envelope
/// and whether it is the genuine one.
pub fn forge(genuine: &str, data: &[u8]) -> (String, bool) {
    use base64::Engine;
    let parts: Vec<&str> = genuine.split('.').collect();
    assert_eq!(parts.len(), 4, "an envelope: {genuine}");
    let (choice, rest) = data.split_first().unwrap_or((&0, &[]));
    let (kid, tag) = if choice & 1 == 0 {
        (parts[1].to_owned(), rest)
    } else {
        // A key id from the input too (up to the first dot-free run of 8 bytes).
        let cut = rest.len().min(8);
        let kid: String = rest[..cut].iter().map(|&b| char::from(b'a' + b % 26)).collect();
        (kid, &rest[cut..])
    };
    let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag);
    let forged = format!("{}.{kid}.{}.{tag}", parts[0], parts[2]);
    let is_genuine = forged == genuine;
    (forged, is_genuine)
}

/// No text opens as sealed state; and a correctly bound, unexpired requestState whose MAC (and
/// key id) come from the input opens, and books, only if it is the genuine one.
pub fn request_state(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for purpose in [Purpose::RequestState, Purpose::JobHandle, Purpose::Cursor, Purpose::LegacySession] {
        assert!(sealer().open(purpose, b"caller", &text).is_err(), "forged envelope opened: {text:?}");
    }
    let app = fresh_app();
    assert!(!book_meeting(&app, Some(&text)).contains("Booked:"), "a forged requestState booked a meeting");
    let first: Value = serde_json::from_str(&book_meeting(&app, None)).expect("JSON");
    let genuine = first["result"]["requestState"].as_str().expect("the first round asks").to_owned();
    let (forged, is_genuine) = forge(&genuine, data);
    let reply = book_meeting(&app, Some(&forged));
    assert!(is_genuine || !reply.contains("Booked:"), "a requestState with a forged MAC booked a meeting: {reply}");
}

/// No text opens as a job handle; and a handle minted for the caller, whose MAC (and key id)
/// come from the input, opens only if it is the genuine one.
pub fn job_handle(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    assert_eq!(handle::open(&sealer(), "caller", &text), None, "forged handle opened: {text:?}");
    let genuine = handle::mint(&sealer(), "caller", "AAAAAAAAAAAAAAAAAAAAAA");
    let (forged, is_genuine) = forge(&genuine, data);
    let opened = handle::open(&sealer(), "caller", &forged);
    assert!(is_genuine || opened.is_none(), "a handle with a forged MAC opened: {forged}");
}

/// A message parses only into a valid job, and what parses round-trips.
pub fn queue_message(data: &[u8]) {
    if let Some(message) = JobMessage::parse(data) {
        assert!(handle::is_job_id(&message.job_id) && !message.owner_id.is_empty() && message.steps >= 1);
        let again = serde_json::to_vec(&message).expect("serialises");
        assert_eq!(JobMessage::parse(&again).as_ref(), Some(&message));
    }
}
