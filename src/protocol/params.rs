//! The params of each request method, parsed into a typed struct before the method runs (and
//! borrowing from the request, so parsing copies nothing). Each refusal is `-32602` with a
//! message naming the member.

use serde_json::{Map, Value};
use std::collections::HashMap;

use super::McpError;

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
    pub fn parse(params: &'a Map<String, Value>) -> Result<Self, McpError> {
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
    pub fn parse(params: &'a Map<String, Value>) -> Result<Self, McpError> {
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
    pub fn parse(params: &'a Map<String, Value>) -> Result<Self, McpError> {
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
    pub fn parse(params: &'a Map<String, Value>) -> Result<Self, McpError> {
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
    pub fn parse(params: &'a Map<String, Value>) -> Result<Self, McpError> {
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
    pub fn parse(params: &'a Map<String, Value>) -> Result<Self, McpError> {
        Ok(Self {
            task_id: string(params, "taskId", "taskId must be a string")?,
            input_responses: input_responses(params)?,
        })
    }
}

/// The `inputResponses` of an MRTR retry or a `tasks/update`: an object, or none.
pub fn input_responses(params: &Map<String, Value>) -> Result<Map<String, Value>, McpError> {
    match params.get("inputResponses") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(responses)) => Ok(responses.clone()),
        Some(_) => Err(McpError::invalid_params("inputResponses must be an object")),
    }
}

fn string<'a>(params: &'a Map<String, Value>, key: &str, problem: &'static str) -> Result<&'a str, McpError> {
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

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn refused<T: std::fmt::Debug>(result: Result<T, McpError>) -> String {
        let error = result.unwrap_err();
        assert_eq!(error.code, crate::protocol::ErrorCode::INVALID_PARAMS);
        error.message.into_owned()
    }

    #[test]
    fn each_method_reads_its_members_and_refuses_the_wrong_types() {
        let call = map(json!({"name": "echo", "arguments": {"message": "hi"}}));
        let parsed = CallToolParams::parse(&call).unwrap();
        assert_eq!((parsed.name, parsed.arguments), ("echo", Some(&json!({"message": "hi"}))));
        assert!(CallToolParams::parse(&map(json!({"name": "echo", "arguments": null}))).unwrap().arguments.is_none());
        assert_eq!(refused(CallToolParams::parse(&map(json!({"name": 7})))), "tools/call requires a string name");
        let bad = map(json!({"name": "echo", "arguments": [1]}));
        assert_eq!(refused(CallToolParams::parse(&bad)), "tools/call arguments must be an object");

        let read = map(json!({"uri": "a://b"}));
        assert_eq!(ReadResourceParams::parse(&read).unwrap().uri, "a://b");
        assert!(refused(ReadResourceParams::parse(&map(json!({})))).contains("uri"));

        let prompt = map(json!({"name": "p", "arguments": {"a": "1"}}));
        let prompt = GetPromptParams::parse(&prompt).unwrap();
        assert_eq!(prompt.arguments["a"], "1");
        let numeric = map(json!({"name": "p", "arguments": {"a": 1}}));
        assert_eq!(refused(GetPromptParams::parse(&numeric)), "prompts/get arguments: values must be strings");

        let list = map(json!({"cursor": "abc"}));
        assert_eq!(ListParams::parse(&list).unwrap().cursor, Some("abc"));
        assert_eq!(refused(ListParams::parse(&map(json!({"cursor": 3})))), "Invalid cursor");

        let task = map(json!({"taskId": "t", "inputResponses": {"k": {}}}));
        let task = TaskParams::parse(&task).unwrap();
        assert_eq!((task.task_id, task.input_responses.len()), ("t", 1));
        assert_eq!(
            refused(TaskParams::parse(&map(json!({"taskId": "t", "inputResponses": 1})))),
            "inputResponses must be an object"
        );

        let complete =
            map(json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": "x"}}));
        let parsed = CompleteParams::parse(&complete).unwrap();
        assert_eq!((parsed.reference, parsed.argument, parsed.value), (CompletionReference::Prompt("p"), "a", "x"));
        let unknown = map(json!({"ref": {"type": "ref/other"}, "argument": {"name": "a", "value": "x"}}));
        assert!(refused(CompleteParams::parse(&unknown)).contains("ref/prompt or ref/resource"));
    }
}
