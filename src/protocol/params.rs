//! A request's `params` ([`RequestParams`], read once from the body), then the params of each
//! request method, parsed into a typed struct before the method runs (and borrowing from the
//! request, so parsing copies nothing). Each refusal is `-32602` with a message naming the member.

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;

use super::{McpError, meta};

/// A request's `params` object: `_meta` read into the members the server gives meaning to
/// ([`RequestMeta`]), every other member kept as JSON, sorted by name, for the method's own
/// typed read.
///
/// Not a `Map`: a `serde_json::Map` is a B-tree whose node (632 bytes) and every key are an
/// allocation, built on every request for a handful of members and taken apart at once; here the
/// members are one small vector whose usual names are not allocated, and `_meta` is no map at all.
/// Its meaning is a `Map`'s exactly (the last of repeated members wins; `_meta` that is not an
/// object means what an absent one means), and [`RequestParams::from`] a `Map` gives the same
/// value as reading the same text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestParams {
    members: Vec<(Cow<'static, str>, Value)>,
    meta: RequestMeta,
}

/// The members of a request's `_meta` that the server reads; the rest are read and dropped.
/// Each is the JSON the client sent (its type is checked where it is used), `None` when absent
/// or when `_meta` is not an object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub protocol_version: Option<Value>,
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub client_capabilities: Option<Value>,
    /// `io.modelcontextprotocol/logLevel`.
    pub log_level: Option<Value>,
    /// `progressToken`.
    pub progress_token: Option<Value>,
    /// `traceparent` (W3C trace context, for a caller that cannot set the header).
    pub traceparent: Option<Value>,
}

impl RequestParams {
    /// The member `name` (never `_meta`: see [`RequestParams::meta`]).
    pub fn get(&self, name: &str) -> Option<&Value> {
        let at = self.members.binary_search_by(|(key, _)| key.as_ref().cmp(name)).ok()?;
        Some(&self.members[at].1)
    }

    /// What `_meta` said.
    pub fn meta(&self) -> &RequestMeta {
        &self.meta
    }

    /// `_meta`'s client capabilities, moved out (the request context keeps them).
    pub fn take_client_capabilities(&mut self) -> Option<Value> {
        self.meta.client_capabilities.take()
    }

    fn from_members(mut members: Vec<(Cow<'static, str>, Value)>, meta: RequestMeta) -> Self {
        // Sorted, then repeated names collapsed onto their last value (a stable sort keeps them in
        // the order they came), as a map built from the same text would hold them.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        members.dedup_by(|later, kept| {
            let repeated = later.0 == kept.0;
            if repeated {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            repeated
        });
        Self { members, meta }
    }
}

impl From<Map<String, Value>> for RequestParams {
    fn from(map: Map<String, Value>) -> Self {
        let mut meta = RequestMeta::default();
        let mut members = Vec::with_capacity(map.len());
        for (name, value) in map {
            match name.as_str() {
                "_meta" => meta = RequestMeta::from(value),
                _ => members.push((member_name(Cow::Owned(name)), value)),
            }
        }
        Self::from_members(members, meta)
    }
}

impl From<Value> for RequestMeta {
    fn from(value: Value) -> Self {
        let mut meta = Self::default();
        if let Value::Object(object) = value {
            for (name, value) in object {
                meta.set(&name, value);
            }
        }
        meta
    }
}

impl RequestMeta {
    /// Records `value` if `name` is a member the server reads.
    fn set(&mut self, name: &str, value: Value) {
        let slot = match name {
            meta::PROTOCOL_VERSION => &mut self.protocol_version,
            meta::CLIENT_CAPABILITIES => &mut self.client_capabilities,
            meta::LOG_LEVEL => &mut self.log_level,
            meta::PROGRESS_TOKEN => &mut self.progress_token,
            "traceparent" => &mut self.traceparent,
            _ => return,
        };
        *slot = Some(value);
    }
}

/// A member name as a `'static` string when it is one the methods read (no allocation), else
/// owned.
fn member_name(name: Cow<'_, str>) -> Cow<'static, str> {
    const KNOWN: [&str; 13] = [
        "name",
        "arguments",
        "uri",
        "cursor",
        "taskId",
        "requestState",
        "inputResponses",
        "ref",
        "argument",
        "context",
        "notifications",
        "protocolVersion",
        "capabilities",
    ];
    match KNOWN.iter().find(|known| **known == name) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(name.into_owned()),
    }
}

impl<'de> Deserialize<'de> for RequestParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ParamsVisitor;
        impl<'de> Visitor<'de> for ParamsVisitor {
            type Value = RequestParams;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a params object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestParams, A::Error> {
                let mut meta = RequestMeta::default();
                // A hint is the sender's claim: bounded, the vector grows past it if it must.
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4).min(16));
                while let Some(Text(name)) = map.next_key()? {
                    match name.as_ref() {
                        // A second `_meta` replaces the first, as in a map.
                        "_meta" => meta = map.next_value()?,
                        _ => members.push((member_name(name), map.next_value()?)),
                    }
                }
                Ok(RequestParams::from_members(members, meta))
            }
        }
        // A map and nothing else: anything else is left to the `Value` read, which refuses it.
        deserializer.deserialize_map(ParamsVisitor)
    }
}

impl<'de> Deserialize<'de> for RequestMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MetaVisitor;
        impl<'de> Visitor<'de> for MetaVisitor {
            type Value = RequestMeta;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a _meta value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestMeta, A::Error> {
                let mut meta = RequestMeta::default();
                while let Some(Text(name)) = map.next_key()? {
                    // Every value is read in full (a skip would not check what it passes over);
                    // one the server does not read is dropped.
                    let value: Value = map.next_value()?;
                    meta.set(&name, value);
                }
                Ok(meta)
            }
            // Anything but an object holds no members: as absent (a `null` `_meta` is common).
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<RequestMeta, A::Error> {
                while seq.next_element::<Value>()?.is_some() {}
                Ok(RequestMeta::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<RequestMeta, E> {
                Ok(RequestMeta::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<RequestMeta, E> {
                Ok(RequestMeta::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<RequestMeta, E> {
                Ok(RequestMeta::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<RequestMeta, E> {
                Ok(RequestMeta::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<RequestMeta, E> {
                Ok(RequestMeta::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<RequestMeta, E> {
                Ok(RequestMeta::default())
            }
        }
        deserializer.deserialize_any(MetaVisitor)
    }
}

/// A JSON string, borrowed from the body unless it has escapes.
pub(super) struct Text<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// `tools/call`.
#[derive(Debug)]
pub struct CallToolParams<'a> {
    /// The tool.
    pub name: &'a str,
    /// Its arguments: an object, or none.
    pub arguments: Option<&'a Value>,
}

impl<'a> CallToolParams<'a> {
    /// Reads `name` (a string) and `arguments` (an object, `null` or absent).
    pub fn parse(params: &'a RequestParams) -> Result<Self, McpError> {
        let name = string(params, "name", "tools/call requires a string name")?;
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => None,
            Some(arguments @ Value::Object(_)) => Some(arguments),
            Some(_) => return Err(McpError::invalid_params("tools/call arguments must be an object")),
        };
        Ok(Self { name, arguments })
    }
}

/// `resources/read`.
#[derive(Debug)]
pub struct ReadResourceParams<'a> {
    /// The resource.
    pub uri: &'a str,
}

impl<'a> ReadResourceParams<'a> {
    /// Reads `uri` (a string).
    pub fn parse(params: &'a RequestParams) -> Result<Self, McpError> {
        Ok(Self { uri: string(params, "uri", "resources/read requires a string uri")? })
    }
}

/// `prompts/get`.
#[derive(Debug)]
pub struct GetPromptParams<'a> {
    /// The prompt.
    pub name: &'a str,
    /// Its arguments (strings by the spec).
    pub arguments: HashMap<String, String>,
}

impl<'a> GetPromptParams<'a> {
    /// Reads `name` (a string) and `arguments` (an object of strings, or none).
    pub fn parse(params: &'a RequestParams) -> Result<Self, McpError> {
        Ok(Self {
            name: string(params, "name", "prompts/get requires a string name")?,
            arguments: string_map(params.get("arguments"), "prompts/get arguments")?,
        })
    }
}

/// What `completion/complete` completes the argument of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompletionReference<'a> {
    /// `ref/prompt` by name.
    Prompt(&'a str),
    /// `ref/resource` by URI template.
    ResourceTemplate(&'a str),
}

/// `completion/complete`.
#[derive(Debug)]
pub struct CompleteParams<'a> {
    /// The prompt or template.
    pub reference: CompletionReference<'a>,
    /// The argument being completed.
    pub argument: &'a str,
    /// What the user has typed so far.
    pub value: &'a str,
    /// The other arguments already given.
    pub context: HashMap<String, String>,
}

impl<'a> CompleteParams<'a> {
    /// Reads `ref`, `argument` (`name` and `value`) and `context.arguments`.
    pub fn parse(params: &'a RequestParams) -> Result<Self, McpError> {
        let reference =
            params.get("ref").ok_or_else(|| McpError::invalid_params("completion/complete requires ref"))?;
        let reference =
            match (reference.get("type").and_then(Value::as_str), reference.get("name"), reference.get("uri")) {
                (Some("ref/prompt"), Some(Value::String(name)), _) => CompletionReference::Prompt(name),
                (Some("ref/resource"), _, Some(Value::String(uri))) => CompletionReference::ResourceTemplate(uri),
                _ => {
                    return Err(McpError::invalid_params("completion/complete ref must be ref/prompt or ref/resource"));
                }
            };
        let argument =
            params.get("argument").ok_or_else(|| McpError::invalid_params("completion/complete requires argument"))?;
        let (Some(name), Some(value)) =
            (argument.get("name").and_then(Value::as_str), argument.get("value").and_then(Value::as_str))
        else {
            return Err(McpError::invalid_params("completion/complete argument needs a name and a value"));
        };
        let context =
            string_map(params.get("context").and_then(|c| c.get("arguments")), "completion context arguments")?;
        Ok(Self { reference, argument: name, value, context })
    }
}

/// The list methods (`tools/list`, `resources/list`, …).
#[derive(Debug, Default)]
pub struct ListParams<'a> {
    /// Where the page starts: a cursor a previous page returned.
    pub cursor: Option<&'a str>,
}

impl<'a> ListParams<'a> {
    /// Reads `cursor` (a string, `null` or absent).
    pub fn parse(params: &'a RequestParams) -> Result<Self, McpError> {
        match params.get("cursor") {
            None | Some(Value::Null) => Ok(Self { cursor: None }),
            Some(Value::String(cursor)) => Ok(Self { cursor: Some(cursor) }),
            Some(_) => Err(invalid_cursor()),
        }
    }
}

/// `-32602` for a cursor this server did not issue (or no longer can honour).
pub fn invalid_cursor() -> McpError {
    McpError::invalid_params("Invalid cursor")
}

/// `tasks/get`, `tasks/update` and `tasks/cancel`.
#[derive(Debug)]
pub struct TaskParams<'a> {
    /// The task.
    pub task_id: &'a str,
    /// `tasks/update`'s answers (an empty object when absent).
    pub input_responses: Map<String, Value>,
}

impl<'a> TaskParams<'a> {
    /// Reads `taskId` (a string) and `inputResponses` (an object, or none).
    pub fn parse(params: &'a RequestParams) -> Result<Self, McpError> {
        Ok(Self {
            task_id: string(params, "taskId", "taskId must be a string")?,
            input_responses: input_responses(params)?,
        })
    }
}

/// The `inputResponses` of an MRTR retry or a `tasks/update`: an object of objects (each the
/// result of one request), or none.
pub fn input_responses(params: &RequestParams) -> Result<Map<String, Value>, McpError> {
    match params.get("inputResponses") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(responses)) => {
            if let Some((key, _)) = responses.iter().find(|(_, answer)| !answer.is_object()) {
                return Err(McpError::invalid_params(format!(
                    "inputResponses.{} must be an object",
                    super::error::truncate_for_message(key)
                )));
            }
            Ok(responses.clone())
        }
        Some(_) => Err(McpError::invalid_params("inputResponses must be an object")),
    }
}

fn string<'a>(params: &'a RequestParams, key: &str, problem: &'static str) -> Result<&'a str, McpError> {
    params.get(key).and_then(Value::as_str).ok_or_else(|| McpError::invalid_params(problem))
}

/// An object whose values are all strings (prompt and completion arguments).
fn string_map(value: Option<&Value>, what: &str) -> Result<HashMap<String, String>, McpError> {
    match value {
        None | Some(Value::Null) => Ok(HashMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(McpError::invalid_params(format!("{what}: values must be strings"))),
            })
            .collect(),
        Some(_) => Err(McpError::invalid_params(format!("{what} must be an object"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(value: Value) -> RequestParams {
        RequestParams::from(value.as_object().unwrap().clone())
    }

    fn refused<T: std::fmt::Debug>(result: Result<T, McpError>) -> String {
        let error = result.unwrap_err();
        assert_eq!(error.code, crate::protocol::ErrorCode::INVALID_PARAMS);
        error.message.into_owned()
    }

    #[test]
    fn each_method_reads_its_members_and_refuses_the_wrong_types() {
        let call = params(json!({"name": "echo", "arguments": {"message": "hi"}}));
        let parsed = CallToolParams::parse(&call).unwrap();
        assert_eq!((parsed.name, parsed.arguments), ("echo", Some(&json!({"message": "hi"}))));
        assert!(
            CallToolParams::parse(&params(json!({"name": "echo", "arguments": null}))).unwrap().arguments.is_none()
        );
        assert_eq!(refused(CallToolParams::parse(&params(json!({"name": 7})))), "tools/call requires a string name");
        let bad = params(json!({"name": "echo", "arguments": [1]}));
        assert_eq!(refused(CallToolParams::parse(&bad)), "tools/call arguments must be an object");

        let read = params(json!({"uri": "a://b"}));
        assert_eq!(ReadResourceParams::parse(&read).unwrap().uri, "a://b");
        assert!(refused(ReadResourceParams::parse(&params(json!({})))).contains("uri"));

        let prompt = params(json!({"name": "p", "arguments": {"a": "1"}}));
        let prompt = GetPromptParams::parse(&prompt).unwrap();
        assert_eq!(prompt.arguments["a"], "1");
        let numeric = params(json!({"name": "p", "arguments": {"a": 1}}));
        assert_eq!(refused(GetPromptParams::parse(&numeric)), "prompts/get arguments: values must be strings");

        let list = params(json!({"cursor": "abc"}));
        assert_eq!(ListParams::parse(&list).unwrap().cursor, Some("abc"));
        assert_eq!(refused(ListParams::parse(&params(json!({"cursor": 3})))), "Invalid cursor");

        let task = params(json!({"taskId": "t", "inputResponses": {"k": {}}}));
        let task = TaskParams::parse(&task).unwrap();
        assert_eq!((task.task_id, task.input_responses.len()), ("t", 1));
        assert_eq!(
            refused(TaskParams::parse(&params(json!({"taskId": "t", "inputResponses": 1})))),
            "inputResponses must be an object"
        );

        let complete =
            params(json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": "x"}}));
        let parsed = CompleteParams::parse(&complete).unwrap();
        assert_eq!((parsed.reference, parsed.argument, parsed.value), (CompletionReference::Prompt("p"), "a", "x"));
        let unknown = params(json!({"ref": {"type": "ref/other"}, "argument": {"name": "a", "value": "x"}}));
        assert!(refused(CompleteParams::parse(&unknown)).contains("ref/prompt or ref/resource"));
    }

    #[test]
    fn a_meta_that_is_not_an_object_is_read_as_absent_in_the_typed_read() {
        for meta in ["null", "5", "-1", "2.5", "true", "\"s\"", "[1, {\"a\": [null]}]"] {
            let text = format!(r#"{{"name":"n","_meta":{{"progressToken":1}},"_meta":{meta}}}"#);
            let read: RequestParams = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{meta}: {e}"));
            assert_eq!(read.meta(), &RequestMeta::default(), "{meta}");
            assert_eq!(read, RequestParams::from(serde_json::from_str::<Map<String, Value>>(&text).unwrap()), "{meta}");
        }
        // Still read in full: what is inside must be valid JSON.
        assert!(serde_json::from_str::<RequestParams>(r#"{"_meta":["\ud800"]}"#).is_err());
    }
}
