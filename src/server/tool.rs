//! Tool definitions: the builder a tool is registered with, its `tools/list` entry (serialised
//! once), the registry's entry for it, and the `x-mcp-header` parameter grammar.

use serde::Serialize;
use serde_json::Value;

use super::ToolFn;
use crate::protocol::types::ToolAnnotations;
use crate::tasks::TaskSupport;

/// A tool's advertised definition.
#[derive(Clone, Debug)]
pub struct ToolDef {
    pub(super) name: String,
    pub(super) title: Option<String>,
    pub(super) description: Option<String>,
    pub(super) input_schema: Option<Value>,
    pub(super) output_schema: Option<Value>,
    pub(super) annotations: Option<ToolAnnotations>,
    pub(super) meta: Option<Value>,
    pub(super) task_support: TaskSupport,
    pub(super) input_before_task: bool,
    pub(super) scopes: Vec<String>,
    pub(super) scopes_always: bool,
}

impl ToolDef {
    /// A tool named `name` (1-128 characters of `[A-Za-z0-9_.-]`).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: None,
            input_schema: None,
            output_schema: None,
            annotations: None,
            meta: None,
            task_support: TaskSupport::Forbidden,
            input_before_task: false,
            scopes: Vec::new(),
            scopes_always: false,
        }
    }

    /// Scopes a caller's token must grant to see and call this tool (when authentication is on).
    pub fn scopes(mut self, scopes: &[&str]) -> Self {
        self.scopes = scopes.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The tool authorizes every call against its scopes itself, even where the deployment does
    /// not enforce scopes (authentication off): list and dispatch it only to callers holding
    /// them, rather than advertising a tool that would refuse them.
    pub fn scopes_always_enforced(mut self) -> Self {
        self.scopes_always = true;
        self
    }

    /// Whether the tool may (or must) run as a task of the tasks extension.
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// Run the handler inline first: an `input_required` answer goes back as a plain MRTR
    /// result, and only a call that needs no (more) input becomes a task.
    pub fn input_before_task(mut self) -> Self {
        self.input_before_task = true;
        self
    }

    /// Display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Description for the model.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// An explicit input schema, for [`McpServer::tool_raw`].
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The schema `structuredContent` conforms to.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Behavioural hints.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// `_meta` on the tool definition.
    pub fn meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `tools/list` entry as JSON text, written straight from the definition: building a
    /// `Value` first copied every schema and cost most of start-up's tool registration.
    pub(super) fn listing_json(&self, input_schema: &Value) -> String {
        let listing = ToolListing {
            meta: self.meta.as_ref(),
            annotations: self.annotations.as_ref(),
            description: self.description.as_deref(),
            input_schema,
            name: &self.name,
            output_schema: self.output_schema.as_ref(),
            title: self.title.as_deref(),
        };
        serde_json::to_string(&listing).expect("tool definitions serialise")
    }
}

/// A tool's `tools/list` entry. Members in sorted order, as a `Value` map writes them.
#[derive(Serialize)]
struct ToolListing<'a> {
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a ToolAnnotations>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(rename = "inputSchema")]
    input_schema: &'a Value,
    name: &'a str,
    #[serde(rename = "outputSchema", skip_serializing_if = "Option::is_none")]
    output_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
}

/// An `x-mcp-header` annotation: `Mcp-Param-{header}` mirrors argument `property`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeaderParam {
    pub header: String,
    pub property: String,
}

pub(crate) struct ToolEntry {
    pub name: String,
    /// The tool's definition serialised once at registration: `tools/list` splices it in as is.
    pub listing_json: String,
    /// What arguments are checked against (the listing shows the JSON).
    pub input_schema: super::schema::LazySchema,
    /// What a result's `structuredContent` is checked against.
    pub output_schema: Option<std::sync::Arc<super::schema::LazySchema>>,
    pub header_params: Vec<HeaderParam>,
    pub task_support: TaskSupport,
    pub input_before_task: bool,
    pub scopes: Vec<String>,
    pub scopes_always: bool,
    pub handler: ToolFn,
}

pub(super) fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// RFC 9110 `tchar`.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Collects and checks the `x-mcp-header` annotations of a tool's root properties. Only
/// root-level `string`/`integer`/`boolean` properties may carry one; names are tokens, unique
/// case-insensitively. Anything else is a registration error.
pub(super) fn header_params(tool: &str, schema: &Value) -> Vec<HeaderParam> {
    let mut out: Vec<HeaderParam> = Vec::new();
    let Some(Value::Object(properties)) = schema.get("properties") else { return out };
    for (property, sub) in properties {
        let Some(header) = sub.get("x-mcp-header") else { continue };
        let header =
            header.as_str().unwrap_or_else(|| panic!("tool {tool}: x-mcp-header on {property} must be a string"));
        assert!(
            !header.is_empty() && header.bytes().all(is_tchar),
            "tool {tool}: x-mcp-header {header:?} is not an HTTP token"
        );
        let kind = sub.get("type").and_then(Value::as_str).unwrap_or("");
        assert!(
            matches!(kind, "string" | "integer" | "boolean"),
            "tool {tool}: x-mcp-header on {property} needs a string, integer or boolean property"
        );
        assert!(
            !out.iter().any(|p| p.header.eq_ignore_ascii_case(header)),
            "tool {tool}: x-mcp-header {header:?} is used twice"
        );
        out.push(HeaderParam { header: header.to_owned(), property: property.clone() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listing_entry_carries_every_part_of_the_definition_and_nothing_else() {
        let annotations = ToolAnnotations { read_only_hint: Some(true), ..ToolAnnotations::default() };
        let full = ToolDef::new("t")
            .title("T")
            .description("d")
            .output_schema(json!({"type": "object"}))
            .annotations(annotations)
            .meta(json!({"k": 1}));
        let input = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let listing: Value = serde_json::from_str(&full.listing_json(&input)).unwrap();
        assert_eq!(
            listing,
            json!({
                "name": "t", "title": "T", "description": "d", "inputSchema": input,
                "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}, "_meta": {"k": 1},
            })
        );
        let bare = ToolDef::new("b").listing_json(&json!({"type": "object"}));
        assert_eq!(bare, r#"{"inputSchema":{"type":"object"},"name":"b"}"#, "absent parts are left out, not null");
    }
}
