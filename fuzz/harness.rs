//! What each fuzz target checks, shared with `tests/fuzz_regressions.rs`, which replays every
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
use vercel_mcp::{App, Config, McpServer};

struct Discard;

impl LogSink for Discard {
    fn emit(&self, _line: String) {}
}

const NOW: u64 = 1_800_000_000_000;

/// The combined catalogue, built once, on a fixed clock, logging nowhere.
static APP: LazyLock<Arc<App>> = LazyLock::new(|| {
    let mut config = Config::for_tests(Arc::new(ManualClock::new(NOW)));
    config.log_sink = Arc::new(Discard);
    let mut server = McpServer::new("fuzz", "0.0.0");
    vercel_mcp::catalogue::register_all(&mut server, &config);
    Arc::new(App::new(server, &config))
});

static RUNTIME: LazyLock<tokio::runtime::Runtime> =
    LazyLock::new(|| tokio::runtime::Builder::new_current_thread().build().expect("a runtime"));

fn sealer() -> Sealer {
    Sealer::new(vec![("k1".into(), vec![7; 32])], Arc::new(ManualClock::new(NOW))).expect("a valid key")
}

/// Sends one request through the whole pipeline; a 5xx for client input is a defect. The body
/// is left unread (a listen stream would never end).
fn send(request: http::Request<Bytes>) -> http::Response<vercel_mcp::transport::Body> {
    let response = RUNTIME.block_on(vercel_mcp::transport::handle(&APP, request));
    assert!(response.status().as_u16() < 500, "server error {} for client input", response.status());
    response
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
        let _ = send(request);
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
    send(modern_request("tools/list", None, json!({"_meta": meta})));
}

/// `book_meeting` with an approving answer and `request_state` (none: the first round); returns
/// the response body. Only a genuine sealed state from the first round may lead to a booking.
pub fn book_meeting(request_state: Option<&str>) -> String {
    let mut params = json!({
        "name": "book_meeting", "arguments": {"topic": "Q3 roadmap"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    if let Some(state) = request_state {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({"confirm": {"action": "accept", "content": {"approved": true}}});
    }
    let response = send(modern_request("tools/call", Some("book_meeting"), params));
    let body = RUNTIME.block_on(http_body_util::BodyExt::collect(response.into_body())).expect("a body");
    String::from_utf8_lossy(&body.to_bytes()).into_owned()
}

/// No input opens as sealed state (that would be a forgery), and the retry path never books
/// with it.
pub fn request_state(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for purpose in [Purpose::RequestState, Purpose::JobHandle, Purpose::Cursor, Purpose::LegacySession] {
        assert!(sealer().open(purpose, b"caller", &text).is_err(), "forged envelope opened: {text:?}");
    }
    let reply = book_meeting(Some(&text));
    assert!(!reply.contains("Booked:"), "a forged requestState booked a meeting: {reply}");
}

/// No input opens as a job handle.
pub fn job_handle(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    assert_eq!(handle::open(&sealer(), "caller", &text), None, "forged handle opened: {text:?}");
}

/// A message parses only into a valid job, and what parses round-trips.
pub fn queue_message(data: &[u8]) {
    if let Some(message) = JobMessage::parse(data) {
        assert!(handle::is_job_id(&message.job_id) && !message.owner_id.is_empty() && message.steps >= 1);
        let again = serde_json::to_vec(&message).expect("serialises");
        assert_eq!(JobMessage::parse(&again).as_ref(), Some(&message));
    }
}
