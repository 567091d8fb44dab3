//! JSON-RPC 2.0 framing: turning a body into exactly one request or notification, and
//! building responses and notifications.
//!
//! The parser is strict on purpose (hyper's school): a batch, a response posted as a request,
//! a `null` id or a non-object `params` is refused before anything else looks at the message.
//!
//! Well-formed messages are read straight into their members ([`Members`]): building a `Value`
//! map for the top level only to take it apart again cost an allocation per key on every
//! request. Anything the typed read refuses (not an object, a duplicate or mistyped member,
//! invalid JSON) is read again as a `Value`, so every message gets the same answer either way.

use super::McpError;
use super::params::{RequestParams, Text};
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::{Value, json};
use std::borrow::Cow;

/// A JSON-RPC request id: a string or an integer, echoed with its original type and value.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestId(Value);

impl RequestId {
    /// Accepts a string or an integer (`i64` or `u64`); anything else is not a valid MCP id.
    pub fn from_value(value: Value) -> Option<Self> {
        match &value {
            Value::String(_) => Some(Self(value)),
            Value::Number(n) if n.is_i64() || n.is_u64() => Some(Self(value)),
            _ => None,
        }
    }

    /// The id as JSON, for echoing.
    pub fn as_value(&self) -> &Value {
        &self.0
    }
}

/// One inbound message, already checked for JSON-RPC shape.
#[derive(Debug)]
pub enum Message {
    /// A request: it gets exactly one response.
    Request {
        /// The id to echo.
        id: RequestId,
        /// The method name.
        method: String,
        /// The params object (empty when absent).
        params: RequestParams,
    },
    /// A notification: answered with `202 Accepted`.
    Notification {
        /// The method name.
        method: String,
    },
    /// A response posted by a client (only meaningful on the legacy path, where the server
    /// may have sent a request on an open stream).
    Response {
        /// The id of the server request being answered.
        id: RequestId,
        /// `Ok(result)` or `Err(error object)`.
        outcome: Result<Value, Value>,
    },
}

/// The most JSON values (objects, arrays, members, elements, scalars) one request body may hold.
/// A parsed value costs tens of bytes where its text costs two (`0,`), so a body of a million tiny
/// values would take tens of MB once parsed; this cap keeps a request's parsed size within a few
/// MB (a small multiple of the default 1 MiB body limit) however the body is shaped. Long strings
/// are one value each, so large arguments are unaffected.
pub const MAX_JSON_VALUES: usize = 65_536;

/// Whether `body` holds more than `limit` JSON values, counted without parsing: every value but
/// the first is preceded by `[`, `{` or `,` outside a string (an upper bound for valid JSON, and
/// exact enough to refuse early). Stops at the first byte past the limit.
fn exceeds_values(body: &[u8], limit: usize) -> bool {
    if body.len() <= limit {
        return false; // each value takes at least one byte
    }
    let (mut count, mut in_string, mut escaped) = (1usize, false, false);
    for &byte in body {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' | b',' => {
                count += 1;
                if count > limit {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// Why a body is not one message the server takes: the error to answer with, and the id of the
/// request it was meant to be when that id could be read. The answer echoes it, so the client can
/// tell which of its requests failed (an error may omit the id only when it could not be read).
#[derive(Debug)]
pub struct NotAMessage {
    /// The request's id, when it was a valid one.
    pub id: Option<RequestId>,
    /// The JSON-RPC error, with its HTTP status.
    pub error: McpError,
}

impl From<McpError> for NotAMessage {
    fn from(error: McpError) -> Self {
        Self { id: None, error }
    }
}

impl Message {
    /// Parses one message from a body. Errors carry their JSON-RPC code and HTTP 400.
    pub fn parse(body: &[u8]) -> Result<Self, NotAMessage> {
        if exceeds_values(body, MAX_JSON_VALUES) {
            return Err(NotAMessage::from(McpError::new(
                super::ErrorCode::INVALID_REQUEST,
                http::StatusCode::PAYLOAD_TOO_LARGE,
                format!("Request body has more than {MAX_JSON_VALUES} JSON values"),
            )));
        }
        let not_json = || McpError::parse_error("Parse error: body is not valid JSON");
        // JSON text is UTF-8 (RFC 8259). Checked once for the whole body: a byte-slice read
        // checks each string on its own, which cost more than this for a call's dozen strings.
        let text = std::str::from_utf8(body).map_err(|_| not_json())?;
        if let Ok(members) = serde_json::from_str::<Members>(text) {
            return Self::from_members(members);
        }
        let value: Value = serde_json::from_str(text).map_err(|_| not_json())?;
        Self::from_value(value)
    }

    /// Checks the JSON-RPC shape of an already parsed value.
    pub fn from_value(value: Value) -> Result<Self, NotAMessage> {
        let mut object = match value {
            Value::Object(object) => object,
            Value::Array(_) => {
                return Err(McpError::invalid_request(
                    "Invalid Request: batch arrays are not supported; send one message per POST",
                )
                .into());
            }
            _ => return Err(McpError::invalid_request("Invalid Request: expected a JSON object").into()),
        };
        let version_ok = object.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
        Self::from_members(Members {
            jsonrpc: version_ok.then_some(Cow::Borrowed("2.0")),
            id: object.remove("id"),
            method: object.remove("method"),
            params: object.remove("params").map(|params| match params {
                Value::Object(params) => Params::Object(params.into()),
                _ => Params::NotObject,
            }),
            result: object.remove("result"),
            error: object.remove("error"),
        })
    }

    fn from_members(members: Members<'_>) -> Result<Self, NotAMessage> {
        let Members { jsonrpc, id, method, params, result, error } = members;
        // The id first: every later refusal of a request carries it.
        let id = match id {
            None => None,
            Some(raw) => Some(
                RequestId::from_value(raw)
                    .ok_or_else(|| McpError::invalid_request("Invalid Request: id must be a string or an integer"))?,
            ),
        };
        // A response's id names one of the server's own requests, not the client's: not echoed.
        // A body with neither a method nor a result or error is a request missing its method,
        // and its id is. (The id moves into a refusal only when there is one: nothing is copied
        // on the way.)
        let is_request = method.is_some() || (result.is_none() && error.is_none());
        let refused = |id: Option<RequestId>, message: &'static str| {
            Err(NotAMessage { id: id.filter(|_| is_request), error: McpError::invalid_request(message) })
        };
        if jsonrpc.as_deref() != Some("2.0") {
            return refused(id, "Invalid Request: jsonrpc must be \"2.0\"");
        }
        let method = match method {
            Some(Value::String(method)) => method,
            Some(_) => return refused(id, "Invalid Request: method must be a string"),
            None if is_request => return refused(id, "Invalid Request: method is required"),
            None => return Ok(Self::response(id, result, error)?),
        };
        let params = match params {
            None => RequestParams::default(),
            Some(Params::Object(params)) => params,
            Some(Params::NotObject) => return refused(id, "Invalid Request: params must be an object"),
        };
        Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method },
        })
    }

    fn response(id: Option<RequestId>, result: Option<Value>, error: Option<Value>) -> Result<Self, McpError> {
        let outcome = match (result, error) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(error),
            _ => {
                return Err(McpError::invalid_request(
                    "Invalid Request: a response has a result or an error, not both",
                ));
            }
        };
        let id = id.ok_or_else(|| McpError::invalid_request("Invalid Request: response without id"))?;
        Ok(Message::Response { id, outcome })
    }
}

/// The members of a message object that JSON-RPC gives meaning to. Each `Option` is `Some`
/// whenever the member is present, even as `null` (a `null` id is an error, not an absence; so
/// is a `params` that is not an object, which only the `Value` read meets).
#[derive(Default)]
struct Members<'a> {
    jsonrpc: Option<Cow<'a, str>>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Params>,
    result: Option<Value>,
    error: Option<Value>,
}

/// A `params` member: an object, or anything else (refused). The typed read only ever sees an
/// object; a body whose `params` is not one is read again as a `Value`.
enum Params {
    Object(RequestParams),
    NotObject,
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A map and nothing else: a derived struct would also read an array positionally.
        deserializer.deserialize_map(MembersVisitor)
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
        fn set<E: de::Error, T>(slot: &mut Option<T>, value: T) -> Result<(), E> {
            // A repeated member is left to the `Value` read, where the last one wins.
            match slot.replace(value) {
                None => Ok(()),
                Some(_) => Err(E::custom("repeated member")),
            }
        }
        let mut members = Members::default();
        while let Some(Text(key)) = map.next_key()? {
            match key.as_ref() {
                "jsonrpc" => set(&mut members.jsonrpc, map.next_value::<Text>()?.0)?,
                "id" => set(&mut members.id, map.next_value()?)?,
                "method" => set(&mut members.method, map.next_value()?)?,
                "params" => set(&mut members.params, Params::Object(map.next_value()?))?,
                "result" => set(&mut members.result, map.next_value()?)?,
                "error" => set(&mut members.error, map.next_value()?)?,
                // Read in full, not skipped: skipping does not check what it passes over (UTF-8,
                // escapes, number range, depth), and such a body must stay a parse error.
                _ => drop(map.next_value::<Value>()?),
            }
        }
        Ok(members)
    }
}

/// Starts a success response in `out`: `{"jsonrpc":"2.0","id":<id>,"result":`. The caller writes
/// the result and the closing `}` (the transport splices pre-serialised parts into results).
pub fn begin_result(out: &mut Vec<u8>, id: &RequestId) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    serde_json::to_writer(&mut *out, id.as_value()).expect("ids serialise");
    out.extend_from_slice(b",\"result\":");
}

/// Serialises a success response.
pub fn result_response(id: &RequestId, result: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    begin_result(&mut out, id);
    serde_json::to_writer(&mut out, result).expect("values serialise");
    out.push(b'}');
    out
}

/// Serialises an error response; `id` is `None` when it could not be read.
pub fn error_response(id: Option<&RequestId>, error: &McpError) -> Vec<u8> {
    let body = match id {
        Some(id) => json!({ "jsonrpc": "2.0", "id": id.as_value(), "error": error.to_json() }),
        None => json!({ "jsonrpc": "2.0", "error": error.to_json() }),
    };
    serde_json::to_vec(&body).expect("values serialise")
}

/// A notification message, serialised: the fixed members written as they are, `params`
/// straight from its type, with no `Value` built on the way (a handler may send progress many
/// times per request).
pub fn notification(method: &str, params: &impl serde::Serialize) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"#);
    serde_json::to_writer(&mut out, method).expect("strings serialise");
    out.extend_from_slice(br#","params":"#);
    serde_json::to_writer(&mut out, params).expect("notification params serialise");
    out.push(b'}');
    out
}

/// Appends `notifications/progress` to `out`: as [`notification`] would write it from a struct of
/// these members (`total` and `message` left out when absent), with the constant text written as
/// it is. A tool may report progress hundreds of times a call, and writing each key and the
/// method through `serde_json`'s escaper, and each whole number through its float formatting, was
/// most of what a notification cost.
pub fn write_progress_notification(
    out: &mut Vec<u8>,
    token: &Value,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) {
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"#);
    serde_json::to_writer(&mut *out, token).expect("values serialise");
    out.extend_from_slice(br#","progress":"#);
    write_f64(out, progress);
    if let Some(total) = total {
        out.extend_from_slice(br#","total":"#);
        write_f64(out, total);
    }
    if let Some(message) = message {
        out.extend_from_slice(br#","message":"#);
        serde_json::to_writer(&mut *out, message).expect("strings serialise");
    }
    out.extend_from_slice(b"}}");
}

/// Writes `value` exactly as `serde_json` writes an `f64`; whole numbers below 10^15 (`3.0`),
/// which progress usually counts in, as an integer and `.0`, at a fraction of the cost.
fn write_f64(out: &mut Vec<u8>, value: f64) {
    if value.is_sign_positive() && value.fract() == 0.0 && value < 1e15 {
        // Exact: a whole number below 2^53 converts without rounding.
        serde_json::to_writer(&mut *out, &(value as u64)).expect("integers serialise");
        out.extend_from_slice(b".0");
    } else {
        serde_json::to_writer(&mut *out, &value).expect("floats serialise");
    }
}

/// Builds a server-to-client request (legacy path only).
pub fn request(id: &str, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorCode;

    /// The hand-written progress notification is byte for byte what the generic builder writes
    /// from a struct: for whole and fractional numbers, the edges of the shortcut, non-finite
    /// values (`null`), tokens of both kinds and a message that needs escaping.
    #[test]
    fn progress_is_written_as_the_generic_builder_writes_it() {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Progress<'a> {
            progress_token: &'a Value,
            progress: f64,
            #[serde(skip_serializing_if = "Option::is_none")]
            total: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<&'a str>,
        }
        let mut numbers = vec![
            0.0,
            -0.0,
            1.0,
            2.5,
            10.0,
            0.1,
            -3.0,
            1e9,
            123_456_789.0,
            1e14,
            1e15 - 1.0,
            1e15,
            1e15 + 1.0,
            1e16,
            9_007_199_254_740_993.0,
            1e21,
            1e-7,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
        ];
        // A fixed-seed sweep of whole and fractional values across the magnitudes.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let magnitude = 10f64.powi((state % 18) as i32);
            let value = (state >> 11) as f64 / (1u64 << 53) as f64 * magnitude;
            numbers.extend([value, value.trunc()]);
        }
        let tokens = [json!("p"), json!(7), json!("quote\"and\\slash"), json!(-1.5)];
        for (i, &progress) in numbers.iter().enumerate() {
            let token = &tokens[i % tokens.len()];
            let total = [None, Some(numbers[(i * 7) % numbers.len()])][i % 2];
            let message = [None, Some("step \"3\"\n\u{1}é")][(i / 2) % 2];
            let expected =
                notification("notifications/progress", &Progress { progress_token: token, progress, total, message });
            let mut written = b"before".to_vec();
            write_progress_notification(&mut written, token, progress, total, message);
            let written = written.strip_prefix(b"before").expect("appended after what was there").to_vec();
            assert_eq!(String::from_utf8(written).unwrap(), String::from_utf8(expected).unwrap(), "{progress:e}");
        }
    }

    #[test]
    fn a_notification_is_one_json_rpc_message() {
        let bytes = notification("notifications/\"odd\"", &json!({ "progressToken": "p", "progress": 1.5 }));
        let parsed: Value = serde_json::from_slice(&bytes).unwrap();
        let params = json!({ "progressToken": "p", "progress": 1.5 });
        assert_eq!(parsed, json!({ "jsonrpc": "2.0", "method": "notifications/\"odd\"", "params": params }));
    }

    #[test]
    fn a_body_of_too_many_values_is_refused_before_parsing() {
        let request = |arguments: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{arguments}}}}}"#
            )
        };
        let zeros = |n: usize| format!("[{}0]", "0,".repeat(n - 1));
        let many =
            Message::parse(request(&format!(r#"{{"a":{}}}"#, zeros(MAX_JSON_VALUES))).as_bytes()).unwrap_err().error;
        assert_eq!((many.code, many.status), (ErrorCode::INVALID_REQUEST, http::StatusCode::PAYLOAD_TOO_LARGE));
        assert!(many.message.contains("65536 JSON values"), "{}", many.message);
        // Just under the cap parses (the envelope's own values count too).
        assert!(Message::parse(request(&zeros(MAX_JSON_VALUES - 16)).as_bytes()).is_ok());
        // A long string is one value, whatever it holds.
        let text = format!(r#""{}""#, r#"[,{\",\\"#.repeat(200_000));
        let long = Message::parse(request(&format!(r#"{{"message":{text}}}"#)).as_bytes());
        assert!(long.is_ok(), "{:?}", long.err().map(|e| e.error.message));
        assert!(!exceeds_values(br#"{"a":"\",,,,,,\\","b":[1,2]}"#, 6), "commas in strings do not count");
        assert!(exceeds_values(br#"{"a":[1,2,3,4,5,6,7,8]}"#, 6));
    }

    fn code(body: &str) -> i32 {
        Message::parse(body.as_bytes()).unwrap_err().error.code.0
    }

    #[test]
    fn refuses_everything_but_one_message() {
        assert_eq!(code("{"), ErrorCode::PARSE_ERROR.0);
        assert_eq!(code("[]"), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code("42"), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"{"id":1,"method":"x"}"#), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#), ErrorCode::INVALID_REQUEST.0);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), ErrorCode::INVALID_REQUEST.0);
    }

    #[test]
    fn the_typed_read_and_the_value_read_agree() {
        // Bodies on both sides of the typed read: escapes, duplicates, extra and mistyped members.
        let bodies = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x"}}}"#,
            r#"{"jsonrpc":"2\u002e0","id":"a","method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","extra":[1,{"y":null}]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":null}"#,
            r#"{"jsonrpc":"2.0","method":"x","params":null}"#,
            r#"{"jsonrpc":2.0,"id":1,"method":"x"}"#,
            r#"{"jsonrpc":null,"id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":"s","error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{}}  "#,
            // Arrays are never read positionally as a message.
            r#"["2.0",1,"tools/call",{"name":"echo","arguments":{}}]"#,
            r#"["2.0"]"#,
            r#"["2.0",null,"x"]"#,
            // Unknown members are checked like the rest of the body.
            r#"{"jsonrpc":"2.0","id":1,"method":"x","z":"\ud800"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","z":1e400}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","z":[[{"a":"\q"}]]}"#,
            // Escaped member names and values mean what they spell.
            r#"{"jsonrpc":"2.0","id":1,"\u006dethod":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":"\u0031","method":"m\u0065"}"#,
            // `params`: repeated members (the last wins), `_meta` repeated, not an object, with
            // members the server does not read, and escaped names.
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"z":1,"name":"a","b":[],"name":"b","z":{"q":2}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"progressToken":1},"_meta":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":7,"_meta":{"progressToken":"p","other":[1]}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"\u005fmeta":{"traceparent":"t","traceparent":"u"},"\u006eame":"n"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol/logLevel":"\ud800"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"progressToken":1,"traceparent":"t"},"_meta":{"progressToken":2}}}"#,
        ];
        let deep = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","z":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
        let mut invalid_utf8 = br#"{"jsonrpc":"2.0","id":1,"method":"x","z":""#.to_vec();
        invalid_utf8.extend_from_slice(b"\xff\xfe\"}");
        // The `Value` read, converted: the same meaning by construction. A body the typed read
        // refuses (25 here) takes it on both sides; the asserts after the loop check that one.
        let value_path = |body: &[u8]| {
            serde_json::from_slice(body)
                .map_err(|_| McpError::parse_error("Parse error: body is not valid JSON").into())
                .and_then(Message::from_value)
        };
        let all = bodies.iter().map(|b| b.as_bytes().to_vec()).chain([deep.into_bytes(), invalid_utf8]);
        for body in all {
            let shown = String::from_utf8_lossy(&body).into_owned();
            assert_eq!(format!("{:?}", Message::parse(&body)), format!("{:?}", value_path(&body)), "{shown}");
        }
        for batch in [13, 14, 15] {
            assert_eq!(code(bodies[batch]), ErrorCode::INVALID_REQUEST.0, "{}", bodies[batch]);
        }
        for invalid in [16, 17, 18] {
            assert_eq!(code(bodies[invalid]), ErrorCode::PARSE_ERROR.0, "{}", bodies[invalid]);
        }
        let Message::Request { method, .. } = Message::parse(bodies[2].as_bytes()).unwrap() else { panic!() };
        assert_eq!(method, "b", "the last of duplicate members wins, as in a Value");
        assert!(matches!(Message::parse(bodies[1].as_bytes()), Ok(Message::Request { .. })));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"x"} x"#), ErrorCode::PARSE_ERROR.0, "trailing bytes");
        let params = |body: &str| match Message::parse(body.as_bytes()) {
            Ok(Message::Request { params, .. }) => params,
            other => panic!("{body}: {other:?}"),
        };
        let repeated = params(bodies[21]);
        assert_eq!((repeated.get("name"), repeated.get("z")), (Some(&json!("b")), Some(&json!({"q": 2}))));
        assert_eq!(params(bodies[22]).meta(), &Default::default(), "a last _meta that is not an object");
        assert_eq!(params(bodies[23]).meta().progress_token, Some(json!("p")));
        let escaped = params(bodies[24]);
        assert_eq!((escaped.get("name"), escaped.meta().traceparent.clone()), (Some(&json!("n")), Some(json!("u"))));
        assert_eq!(escaped.get("_meta"), None, "_meta is read only through meta()");
        assert_eq!(code(bodies[25]), ErrorCode::PARSE_ERROR.0, "a lone surrogate in _meta");
        let meta = params(bodies[26]).meta().clone();
        assert_eq!(
            (meta.progress_token, meta.traceparent),
            (Some(json!(2)), None),
            "the last _meta replaces the first"
        );
    }

    #[test]
    fn keeps_id_type_and_value() {
        for raw in ["7", "\"7\"", "9223372036854775807", "18446744073709551615", "-9223372036854775808"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"tools/list"}}"#);
            let Message::Request { id, .. } = Message::parse(body.as_bytes()).unwrap() else { panic!("not a request") };
            let out = result_response(&id, &json!({}));
            assert!(String::from_utf8(out).unwrap().contains(&format!("\"id\":{raw}")));
        }
    }

    #[test]
    fn classifies_notifications_and_responses() {
        assert!(matches!(
            Message::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap(),
            Message::Notification { .. }
        ));
        assert!(matches!(
            Message::parse(br#"{"jsonrpc":"2.0","id":"s1","result":{}}"#).unwrap(),
            Message::Response { outcome: Ok(_), .. }
        ));
    }
}
