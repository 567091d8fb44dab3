//! The 2026-07-28 standard headers: reading them, decoding the `=?base64?…?=` sentinel, and
//! comparing them with the body.
//!
//! Header names are case-insensitive (the `http` crate lowercases them); values are
//! case-sensitive. A header that appears twice is refused rather than guessed at.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::header::AsHeaderName;
use http::{HeaderMap, HeaderName};
use serde_json::Value;
use std::borrow::Cow;

// Names as `HeaderName` constants: a lookup by `&str` parses and validates the name first, on
// every request.
/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Method`.
pub const METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`.
pub const NAME: HeaderName = HeaderName::from_static("mcp-name");
/// W3C `traceparent`.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// The server-assigned request id sent back on every response.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-mcp-request-id");
/// Prefix of `Mcp-Param-{Name}`.
pub const PARAM_PREFIX: &str = "mcp-param-";

/// Why a header could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Sent more than once.
    Repeated,
    /// Bytes outside visible ASCII, space and tab; or a bad sentinel.
    Invalid,
}

/// Reads a header that must appear at most once, as raw text.
pub fn single(headers: &HeaderMap, name: impl AsHeaderName) -> Result<Option<&str>, HeaderProblem> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(HeaderProblem::Repeated);
    }
    // `to_str` accepts exactly visible ASCII, space and tab, in one pass.
    first.to_str().map(Some).map_err(|_| HeaderProblem::Invalid)
}

/// Decodes a value that may use the `=?base64?{standard base64 of UTF-8}?=` sentinel.
pub fn decode_value(raw: &str) -> Result<Cow<'_, str>, HeaderProblem> {
    let Some(encoded) = raw.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) else {
        return Ok(Cow::Borrowed(raw));
    };
    // Strict: canonical padding and alphabet only (the SEP-2243 test table rejects both).
    let bytes = STANDARD.decode(encoded).map_err(|_| HeaderProblem::Invalid)?;
    String::from_utf8(bytes).map(Cow::Owned).map_err(|_| HeaderProblem::Invalid)
}

/// Encodes a value for a header: plain when it is visible ASCII and spaces with no space at
/// either end, the base64 sentinel otherwise (control characters, tabs included, always go
/// through base64; so does a value that itself looks like the sentinel).
pub fn encode_value(value: &str) -> Cow<'_, str> {
    let looks_like_sentinel = value.starts_with("=?base64?") && value.ends_with("?=");
    let safe = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !looks_like_sentinel;
    if safe { Cow::Borrowed(value) } else { Cow::Owned(format!("=?base64?{}?=", STANDARD.encode(value))) }
}

/// Whether a decoded `Mcp-Param-*` header equals the body value it mirrors: strings exactly,
/// integers numerically (`42.0` equals `42`), booleans as `true`/`false`.
pub fn param_matches(header: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => header == s,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        // An integer (the only numbers `x-mcp-header` may map) is compared exactly: as floats,
        // 2^53 + 1 would equal 2^53, and `1e-400` would equal 0.
        Value::Number(n) => match n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)) {
            Some(body) => decimal_integer(header) == Some(body),
            None => match (header.parse::<f64>(), n.as_f64()) {
                (Ok(h), Some(b)) => h.is_finite() && h == b,
                _ => false,
            },
        },
        _ => false,
    }
}

/// The integer a decimal number in JSON's notation (`-42`, `42.0`, `4.2e1`) spells, or `None`
/// when it is not one, has no exact integer value, or is beyond `i128`.
fn decimal_integer(text: &str) -> Option<i128> {
    // A plain integer, the usual header, without building anything (Rust's parser takes a `+`,
    // which JSON's notation does not).
    if !text.starts_with('+') {
        if let Ok(plain) = text.parse::<i128>() {
            return Some(plain);
        }
    }
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => {
            (&unsigned[..at], unsigned[at + 1..].strip_prefix('+').unwrap_or(&unsigned[at + 1..]).parse::<i32>().ok()?)
        }
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let well_formed = |digits: &str| digits.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !well_formed(whole)
        || !well_formed(fraction)
        || (mantissa.contains('.') && fraction.is_empty())
    {
        return None;
    }
    // The digits as one integer times ten to `scale`, trailing zeros moved into the scale.
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    let scale = i64::from(exponent) - fraction.len() as i64 + (significant.len() - trimmed.len()) as i64;
    if trimmed.is_empty() {
        return Some(0);
    }
    if scale < 0 || trimmed.len() as i64 + scale > 39 {
        return None;
    }
    let magnitude: i128 = format!("{trimmed}{}", "0".repeat(scale as usize)).parse().ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    #[test]
    fn decodes_the_sentinel() {
        assert_eq!(decode_value("plain").unwrap(), "plain");
        assert_eq!(decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(), "Hello, 世界");
        assert_eq!(decode_value("=?base64?IHBhZGRlZCA=?=").unwrap(), " padded ");
        assert_eq!(decode_value("=?base64?IHBhZGRlZCA?="), Err(HeaderProblem::Invalid), "missing padding");
        assert_eq!(decode_value("=?base64?IHBhZGRlZCA===?="), Err(HeaderProblem::Invalid), "extra padding");
        assert_eq!(decode_value("=?base64?!!!?="), Err(HeaderProblem::Invalid));
        assert_eq!(decode_value("=?base64?/w==?="), Err(HeaderProblem::Invalid), "not UTF-8");
        // Case-sensitive prefix: not the sentinel, so taken literally.
        assert_eq!(decode_value("=?BASE64?YQ==?=").unwrap(), "=?BASE64?YQ==?=");
    }

    #[test]
    fn encodes_round_trip() {
        for v in ["plain", "Hello, 世界", " padded ", "=?base64?YQ==?=", "line\nbreak", ""] {
            assert_eq!(decode_value(&encode_value(v)).unwrap(), v);
        }
        assert_eq!(encode_value("us-west1"), "us-west1");
        assert_eq!(encode_value("us west 1"), "us west 1");
        assert_eq!(encode_value("\tindented"), "=?base64?CWluZGVudGVk?=");
        assert_eq!(encode_value("line1\r\nline2"), "=?base64?bGluZTENCmxpbmUy?=");
    }

    #[test]
    fn reads_single_headers_strictly() {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-name", HeaderValue::from_static("echo"));
        assert_eq!(single(&headers, NAME), Ok(Some("echo")));
        assert_eq!(single(&headers, METHOD), Ok(None));
        headers.append("mcp-name", HeaderValue::from_static("other"));
        assert_eq!(single(&headers, NAME), Err(HeaderProblem::Repeated));
        let mut headers = HeaderMap::new();
        headers.insert("mcp-name", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        assert_eq!(single(&headers, NAME), Err(HeaderProblem::Invalid));
        headers.insert("mcp-name", HeaderValue::from_bytes(b"a\tb ~").unwrap());
        assert_eq!(single(&headers, NAME), Ok(Some("a\tb ~")), "tab and space are text");
    }

    #[test]
    fn compares_params() {
        assert!(param_matches("us-west1", &json!("us-west1")));
        assert!(!param_matches("US-WEST1", &json!("us-west1")));
        assert!(param_matches("42", &json!(42)));
        assert!(param_matches("42.0", &json!(42)));
        assert!(!param_matches("43", &json!(42)));
        assert!(!param_matches("NaN", &json!(42)));
        assert!(param_matches("true", &json!(true)));
        assert!(!param_matches("True", &json!(true)));
        assert!(!param_matches("x", &json!(null)));
    }

    #[test]
    fn compares_integers_exactly() {
        for equal in ["9007199254740993", "9007199254740993.000", "9.007199254740993e15", "90071992547409930e-1"] {
            assert!(param_matches(equal, &json!(9_007_199_254_740_993u64)), "{equal}");
        }
        // Equal as floats, not as integers.
        assert!(!param_matches("9007199254740992", &json!(9_007_199_254_740_993u64)));
        assert!(!param_matches("1e-400", &json!(0)));
        assert!(!param_matches("0.5", &json!(0)));
        assert!(!param_matches("1e400", &json!(1)));
        for zero in ["0", "-0", "0.0", "0e5", "000"] {
            assert!(param_matches(zero, &json!(0)), "{zero}");
        }
        assert!(param_matches("-42", &json!(-42)));
        assert!(param_matches("18446744073709551615", &json!(u64::MAX)));
        assert!(param_matches("-9223372036854775808", &json!(i64::MIN)));
        for malformed in ["", "-", "1.", ".5", "1e", "0x10", "+1", "1_000", " 1", "1e+", "NaN", "inf"] {
            assert!(!param_matches(malformed, &json!(1)), "{malformed:?}");
            assert_eq!(decimal_integer(malformed), None, "{malformed:?}");
        }
    }
}
