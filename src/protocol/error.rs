//! JSON-RPC and MCP error codes, and the one error type every layer returns.
//!
//! The HTTP status travels with the error because 2026-07-28 ties several codes to a status
//! (`-32020`/`-32021`/`-32022` are 400, `-32601` is 404); the transport never has to guess.

use http::StatusCode;
use serde_json::{Value, json};
use std::borrow::Cow;

/// Numeric JSON-RPC error codes used on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// Invalid JSON.
    pub const PARSE_ERROR: Self = Self(-32700);
    /// Not a single, well-formed JSON-RPC request or notification.
    pub const INVALID_REQUEST: Self = Self(-32600);
    /// Unknown method or capability not advertised.
    pub const METHOD_NOT_FOUND: Self = Self(-32601);
    /// Invalid params (missing `_meta`, unknown tool, bad cursor, resource not found, ...).
    pub const INVALID_PARAMS: Self = Self(-32602);
    /// A fault inside the server.
    pub const INTERNAL_ERROR: Self = Self(-32603);
    /// A required header is missing, malformed or disagrees with the body.
    pub const HEADER_MISMATCH: Self = Self(-32020);
    /// The request did not declare a client capability the server needs.
    pub const MISSING_CLIENT_CAPABILITY: Self = Self(-32021);
    /// The requested protocol revision is not supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: Self = Self(-32022);
    /// 2025-11-25 "resource not found"; emitted only on the legacy path.
    pub const LEGACY_RESOURCE_NOT_FOUND: Self = Self(-32002);
}

/// A protocol-level failure: becomes a JSON-RPC `error` object and an HTTP status.
#[derive(Clone, Debug, PartialEq)]
pub struct McpError {
    /// The JSON-RPC code.
    pub code: ErrorCode,
    /// Human-readable message; never contains secrets or attacker-chosen bulk.
    pub message: Cow<'static, str>,
    /// Optional structured detail.
    pub data: Option<Value>,
    /// The HTTP status this error is sent with.
    pub status: StatusCode,
}

impl McpError {
    /// An error with an explicit status.
    pub fn new(code: ErrorCode, status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self { code, message: message.into(), data: None, status }
    }

    /// Attaches `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// `-32700`, HTTP 400.
    pub fn parse_error(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::PARSE_ERROR, StatusCode::BAD_REQUEST, message)
    }

    /// `-32600`, HTTP 400.
    pub fn invalid_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::INVALID_REQUEST, StatusCode::BAD_REQUEST, message)
    }

    /// `-32601`, HTTP 404 (MUST carry a JSON-RPC body).
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            ErrorCode::METHOD_NOT_FOUND,
            StatusCode::NOT_FOUND,
            format!("Method not found: {}", truncate_for_message(method)),
        )
    }

    /// `-32602` with HTTP 200: an in-band invalid-params error (unknown tool, bad cursor, ...).
    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::INVALID_PARAMS, StatusCode::OK, message)
    }

    /// `-32602` with HTTP 400: the `_meta` envelope is incomplete.
    pub fn missing_meta(field: &str) -> Self {
        Self::new(ErrorCode::INVALID_PARAMS, StatusCode::BAD_REQUEST, format!("Missing required _meta field: {field}"))
    }

    /// `-32600`, HTTP 429: a cap on what one caller, or the server, holds at once is reached;
    /// the message names the cap.
    pub fn too_many_requests(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::INVALID_REQUEST, StatusCode::TOO_MANY_REQUESTS, message)
    }

    /// `-32603`, HTTP 500.
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::INTERNAL_ERROR, StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// `-32020`, HTTP 400.
    pub fn header_mismatch(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::HEADER_MISMATCH, StatusCode::BAD_REQUEST, message)
    }

    /// `-32021`, HTTP 400, naming the capabilities the server needs.
    pub fn missing_capability(message: impl Into<Cow<'static, str>>, required: Value) -> Self {
        Self::new(ErrorCode::MISSING_CLIENT_CAPABILITY, StatusCode::BAD_REQUEST, message)
            .with_data(json!({ "requiredCapabilities": required }))
    }

    /// `-32022`, HTTP 400, listing what is supported and echoing what was asked for.
    pub fn unsupported_version(requested: &str) -> Self {
        Self::new(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION, StatusCode::BAD_REQUEST, "Unsupported protocol version")
            .with_data(json!({
                "supported": super::SUPPORTED_VERSIONS,
                "requested": truncate_for_message(requested),
            }))
    }

    /// The JSON-RPC `error` member.
    pub fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code.0, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

impl std::fmt::Display for McpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code.0)
    }
}

impl std::error::Error for McpError {}

/// Caps attacker-chosen text quoted back in an error message or a log line, and writes the
/// characters [`misleading_when_shown`] names as escapes (`\n`, `\u{1b}`, `\u{2028}`): a message
/// reaches a model or a terminal, and a line a log reader, where a raw newline, line separator,
/// escape sequence or direction override could pass for something the server wrote.
pub fn truncate_for_message(s: &str) -> Cow<'_, str> {
    const MAX: usize = 128;
    let mut end = s.len().min(MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let (kept, cut) = (&s[..end], end < s.len());
    let mut quoted = escape_where(kept, misleading_when_shown);
    if cut {
        quoted.to_mut().push('…');
    }
    quoted
}

/// A character that does something other than show itself: a control character, a line or
/// paragraph separator (which JavaScript and Python's `splitlines` take for a line end), or a
/// mark or override of text direction (which reorders what a terminal shows).
pub fn misleading_when_shown(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with each character `escaped` says written as its Rust escape (`\u{1b}`, `\n`),
/// unchanged (borrowed) when there is none.
pub fn escape_where(text: &str, escaped: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escaped) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::truncate_for_message;

    #[test]
    fn quoted_text_is_capped_and_its_control_characters_escaped() {
        assert!(matches!(truncate_for_message("plain"), std::borrow::Cow::Borrowed("plain")));
        assert_eq!(truncate_for_message("a\nb\u{1b}c\u{85}"), "a\\nb\\u{1b}c\\u{85}");
        assert_eq!(truncate_for_message("a\u{2028}b\u{202e}c\u{2066}d"), "a\\u{2028}b\\u{202e}c\\u{2066}d");
        let long = "é".repeat(100);
        let capped = truncate_for_message(&long);
        assert_eq!(capped, format!("{}…", "é".repeat(64)), "cut at a character boundary, marked");
        assert_eq!(truncate_for_message(&format!("{}\n", "x".repeat(200))), format!("{}…", "x".repeat(128)));
    }
}
