//! Multi round-trip requests on the modern path: sealing the handler's state into
//! `requestState`, and refusing any state that was not minted for this very request.
//!
//! The binding covers the endpoint (its canonical resource URL), the principal, the method and a
//! digest of the request's salient params (tool or prompt name and arguments, or resource URI),
//! so state cannot be replayed by another caller, onto another endpoint's tool of the same name,
//! onto another tool, or onto the same tool with other arguments.

use ring::digest;
use serde_json::{Map, Value, json};

use super::InputRequired;
use crate::protocol::McpError;
use crate::protocol::params::RequestParams;
use crate::security::Principal;
use crate::state::{Purpose, SealError, Sealer};

/// How long a `requestState` stays valid: long enough for a person to answer a form.
pub const REQUEST_STATE_TTL_MS: u64 = 10 * 60 * 1000;
/// How long a used state's nonce is remembered: the state's lifetime and a minute more. The
/// state expires by the clock of the instance that opens it, and was sealed by another's; kept
/// for the lifetime alone, a nonce could be forgotten while a state sealed on a clock running
/// ahead was still accepted, and the state replayed.
pub const NONCE_KEPT_MS: u64 = REQUEST_STATE_TTL_MS + 60 * 1000;

/// The methods that may answer `input_required`.
pub fn supports_mrtr(method: &str) -> bool {
    matches!(method, "tools/call" | "resources/read" | "prompts/get")
}

/// The binding of a request: endpoint, principal, method and a digest of the salient params.
pub fn binding(endpoint: &str, principal: &Principal, method: &str, params: &RequestParams) -> Vec<u8> {
    let salient: &[&str] = match method {
        "tools/call" | "prompts/get" => &["name", "arguments"],
        "resources/read" => &["uri"],
        _ => &[],
    };
    let mut ctx = digest::Context::new(&digest::SHA256);
    for key in salient {
        ctx.update(key.as_bytes());
        ctx.update(b"=");
        let mut canonical = Vec::new();
        write_canonical(params.get(key).unwrap_or(&Value::Null), &mut canonical);
        ctx.update(&canonical);
        ctx.update(b"\n");
    }
    let mut out = Vec::with_capacity(endpoint.len() + principal.id().len() + method.len() + 35);
    out.extend_from_slice(endpoint.as_bytes());
    out.push(0);
    out.extend_from_slice(principal.id().as_bytes());
    out.push(0);
    out.extend_from_slice(method.as_bytes());
    out.push(0);
    out.extend_from_slice(ctx.finish().as_ref());
    out
}

/// JSON with object keys sorted at every level, so the digest does not depend on key order.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, key).expect("strings serialise");
                out.push(b':');
                write_canonical(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("scalars serialise"),
    }
}

/// The `-32602` sent for state that fails verification. The reason says whether to start over
/// (expired) without revealing which check failed otherwise.
pub fn state_error(error: SealError) -> McpError {
    let reason = if error == SealError::Expired { "expired" } else { "invalid" };
    McpError::invalid_params(format!("Invalid requestState: {reason}")).with_data(json!({ "reason": reason }))
}

/// The `-32602` sent for state that was already used once: start the call over.
pub fn state_used() -> McpError {
    McpError::invalid_params("Invalid requestState: used").with_data(json!({ "reason": "used" }))
}

/// A retry's opened state: the handler's own state, and the nonce that makes it single-use.
#[derive(Debug)]
pub struct OpenedState {
    /// What the handler sealed.
    pub state: Value,
    /// The nonce minted with it (absent only from a state sealed by an older release, which is
    /// refused while states are single use).
    pub nonce: Option<String>,
}

fn new_nonce() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut bytes).expect("the OS random source works");
    crate::state::seal::hex(&bytes)
}

/// Reads `inputResponses` and opens `requestState` from a retry's params, sent to `endpoint`.
pub fn open_retry(
    sealer: &Sealer,
    endpoint: &str,
    principal: &Principal,
    method: &str,
    params: &RequestParams,
) -> Result<(Map<String, Value>, Option<OpenedState>), McpError> {
    let mut responses = crate::protocol::params::input_responses(params)?;
    let state = match params.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(sealed)) => {
            let mut opened = sealer
                .open(Purpose::RequestState, &binding(endpoint, principal, method, params), sealed)
                .map_err(state_error)?;
            let nonce = opened.get("n").and_then(Value::as_str).map(str::to_owned);
            // Only answers to what the round asked reach the handler; others are ignored, as
            // the spec says of unknown keys. (A state sealed before the asked keys were sealed
            // with it names none, and keeps every answer, until it expires.)
            if let Some(asked) = opened.get("k").and_then(Value::as_array) {
                responses.retain(|key, _| asked.iter().any(|k| k.as_str() == Some(key)));
            }
            Some(OpenedState { state: opened.get_mut("s").map(Value::take).unwrap_or(Value::Null), nonce })
        }
        Some(_) => return Err(state_error(SealError::Malformed)),
    };
    // A first call's answers (no state) reach the handler as they are: the official suite
    // expects a call that brings the answer along to complete. A handler for which an answer
    // must follow its question (a confirmation) checks its own sealed state, as
    // `catalogue::solicited_answer` does.
    Ok((responses, state))
}

/// Builds the modern `input_required` result: gates every request on the capabilities this
/// request declared (`-32021` naming all that are missing) and seals the state for `endpoint`.
pub fn input_required_result(
    sealer: &Sealer,
    endpoint: &str,
    principal: &Principal,
    method: &str,
    params: &RequestParams,
    client_capabilities: &Map<String, Value>,
    input: InputRequired,
) -> Result<Map<String, Value>, McpError> {
    let mut missing = Map::new();
    for (_, request) in &input.requests {
        let (needed, granted) = request.capability(client_capabilities);
        if !granted {
            merge(&mut missing, needed);
        }
    }
    if !missing.is_empty() {
        let names: Vec<&str> = missing.keys().map(String::as_str).collect();
        let message = format!("Server requires the {} capability for this request", names.join(" and "));
        return Err(McpError::missing_capability(message, Value::Object(missing)));
    }
    let mut result = Map::new();
    result.insert("resultType".into(), json!("input_required"));
    if !input.requests.is_empty() {
        let requests: Map<String, Value> = input.requests.iter().map(|(k, r)| (k.clone(), r.to_json())).collect();
        result.insert("inputRequests".into(), Value::Object(requests));
    }
    // Always seal something so a retry is bound to this request even when the handler keeps no
    // state of its own.
    // The nonce travels sealed with the handler's state: a retry is served once per nonce when
    // single use is on (see `crate::state::nonce`).
    // With them, the keys asked: a retry's answers to anything else are dropped on opening.
    let asked: Vec<&str> = input.requests.iter().map(|(key, _)| key.as_str()).collect();
    let state = json!({ "n": new_nonce(), "s": input.state.unwrap_or(Value::Null), "k": asked });
    let sealed =
        sealer.seal(Purpose::RequestState, &binding(endpoint, principal, method, params), REQUEST_STATE_TTL_MS, state);
    // A state no instance would open (they refuse envelopes past this length before reading
    // them) fails here, naming the cause, rather than at every retry as "invalid".
    if sealed.len() > crate::state::seal::MAX_SEALED_LEN {
        return Err(McpError::internal(format!(
            "Internal error: the tool's state between rounds is too large ({} bytes sealed, at most {}); keep less of it",
            sealed.len(),
            crate::state::seal::MAX_SEALED_LEN
        )));
    }
    result.insert("requestState".into(), Value::String(sealed));
    Ok(result)
}

fn merge(into: &mut Map<String, Value>, fragment: Value) {
    let Value::Object(fragment) = fragment else { return };
    for (key, value) in fragment {
        match (into.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(more)) => existing.extend(more),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_ignores_key_order_but_not_values() {
        let p = Principal::anonymous();
        let a: RequestParams =
            serde_json::from_str(r#"{"name":"t","arguments":{"x":1,"y":[1,{"b":2,"a":1}]}}"#).unwrap();
        let b: RequestParams =
            serde_json::from_str(r#"{"arguments":{"y":[1,{"a":1,"b":2}],"x":1},"name":"t","inputResponses":{}}"#)
                .unwrap();
        let c: RequestParams =
            serde_json::from_str(r#"{"name":"t","arguments":{"x":2,"y":[1,{"a":1,"b":2}]}}"#).unwrap();
        let here = "http://localhost:3000/api/mcp";
        assert_eq!(binding(here, &p, "tools/call", &a), binding(here, &p, "tools/call", &b));
        assert_ne!(binding(here, &p, "tools/call", &a), binding(here, &p, "tools/call", &c));
        assert_ne!(binding(here, &p, "tools/call", &a), binding(here, &p, "prompts/get", &a));
        let other = Principal::verified(Some("u"), None, vec![]);
        assert_ne!(binding(here, &p, "tools/call", &a), binding(here, &other, "tools/call", &a));
        let elsewhere = "http://localhost:3000/api/examples/minimal";
        assert_ne!(binding(here, &p, "tools/call", &a), binding(elsewhere, &p, "tools/call", &a));
    }

    /// A state every instance would refuse to open is refused when sealed, with its cause; one
    /// within the bound round-trips.
    #[test]
    fn a_state_too_large_to_open_is_refused_when_sealed() {
        let clock = std::sync::Arc::new(crate::state::ManualClock::new(0));
        let sealer = Sealer::new(vec![("k".into(), vec![7; 32])], clock).unwrap();
        let (here, p) = ("http://localhost:3000/api/mcp", Principal::anonymous());
        let params: RequestParams = serde_json::from_str(r#"{"name":"t","arguments":{}}"#).unwrap();
        let ask = |size: usize| {
            let input = InputRequired::new().state(json!("x".repeat(size)));
            input_required_result(&sealer, here, &p, "tools/call", &params, &Map::new(), input)
        };
        let error = ask(48 * 1024).unwrap_err();
        assert!(error.message.contains("too large") && error.message.contains("at most 65536"), "{}", error.message);
        let fits = ask(40 * 1024).unwrap();
        let retry = json!({"name": "t", "arguments": {}, "requestState": fits["requestState"]});
        let retry: RequestParams = serde_json::from_value(retry).unwrap();
        let (_, opened) = open_retry(&sealer, here, &p, "tools/call", &retry).unwrap();
        assert_eq!(opened.unwrap().state, json!("x".repeat(40 * 1024)));
    }
}
