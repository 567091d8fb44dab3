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

/// An `x-mcp-header` annotation: `Mcp-Param-{header}` mirrors the argument at `path`, the
/// property names leading to it from the arguments object (one name for a root property).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderParam {
    pub header: String,
    pub path: Vec<String>,
}

impl HeaderParam {
    /// The argument's value in `arguments`, if every object on the way holds the next name.
    pub fn value_in<'a>(&self, arguments: &'a Value) -> Option<&'a Value> {
        self.path.iter().try_fold(arguments, |at, name| at.as_object()?.get(name))
    }

    /// The path as the error messages name it (`target.region`).
    pub fn property(&self) -> String {
        self.path.join(".")
    }
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
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Collects and checks the `x-mcp-header` annotations of an input schema (SEP-2243). One may
/// sit on a `string`, `integer` or `boolean` property reached from the root through `properties`
/// alone; its name is an HTTP token, unique case-insensitively. An annotation anywhere else (the
/// root, under `items`, `oneOf`, `$defs`, `additionalProperties`...) breaks the rules, and so
/// does a bad name: the server refuses such a tool at registration, and a client drops it.
pub fn input_schema_header_params(schema: &Value) -> Result<Vec<HeaderParam>, String> {
    let mut out = Vec::new();
    scan_for_headers(schema, Some(&mut Vec::new()), &mut out)?;
    Ok(out)
}

/// Keywords whose value is one schema, a list of schemas, or a map of names to schemas: where an
/// annotation could hide. Other keywords' values (`enum`, `default`, `examples`...) are data.
const ONE_SCHEMA: &[&str] = &[
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
];
const SCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
const SCHEMA_MAPS: &[&str] = &["patternProperties", "$defs", "definitions", "dependentSchemas"];

/// Walks `schema`; `path` is the property names from the root while every step has been through
/// `properties` (`None` once any step was not).
fn scan_for_headers(schema: &Value, path: Option<&mut Vec<String>>, out: &mut Vec<HeaderParam>) -> Result<(), String> {
    let Value::Object(schema) = schema else { return Ok(()) };
    if let Some(header) = schema.get("x-mcp-header") {
        let header = header.as_str().ok_or("x-mcp-header must be a string")?;
        if header.is_empty() || !header.bytes().all(is_tchar) {
            return Err(format!("x-mcp-header {header:?} is not an HTTP token"));
        }
        let at = match &path {
            Some(path) if !path.is_empty() => path.join("."),
            _ => {
                return Err(format!(
                    "x-mcp-header {header:?} must be on a property reached from the root through properties alone \
                     (not the root, nor under $ref, items, anyOf and the like; a nested Rust struct needs #[schemars(inline)])"
                ));
            }
        };
        if !matches!(schema.get("type").and_then(Value::as_str), Some("string" | "integer" | "boolean")) {
            return Err(format!("x-mcp-header on {at} needs a string, integer or boolean property"));
        }
        if out.iter().any(|p| p.header.eq_ignore_ascii_case(header)) {
            return Err(format!("x-mcp-header {header:?} is used twice"));
        }
        out.push(HeaderParam {
            header: header.to_owned(),
            path: path.as_ref().map(|p| p.to_vec()).unwrap_or_default(),
        });
    }
    let mut path = path;
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, sub) in properties {
            match path.as_deref_mut() {
                Some(path) => {
                    path.push(name.clone());
                    let scanned = scan_for_headers(sub, Some(&mut *path), out);
                    path.pop();
                    scanned?;
                }
                None => scan_for_headers(sub, None, out)?,
            }
        }
    }
    for keyword in ONE_SCHEMA {
        if let Some(sub) = schema.get(*keyword) {
            scan_for_headers(sub, None, out)?;
        }
    }
    for keyword in SCHEMA_LISTS {
        if let Some(Value::Array(subs)) = schema.get(*keyword) {
            subs.iter().try_for_each(|sub| scan_for_headers(sub, None, out))?;
        }
    }
    for keyword in SCHEMA_MAPS {
        if let Some(Value::Object(subs)) = schema.get(*keyword) {
            subs.values().try_for_each(|sub| scan_for_headers(sub, None, out))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers_of(schema: Value) -> Result<Vec<(String, String)>, String> {
        Ok(input_schema_header_params(&schema)?.into_iter().map(|p| (p.header.clone(), p.property())).collect())
    }

    #[test]
    fn annotations_are_found_through_properties_at_any_depth() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "target": {"type": "object", "properties": {
                "zone": {"type": "integer", "x-mcp-header": "Zone"},
                "deep": {"type": "object", "properties": {"on": {"type": "boolean", "x-mcp-header": "On"}}},
            }},
            // Data that happens to look like an annotation is not one.
            "mode": {"type": "string", "default": {"x-mcp-header": "Nope"}, "enum": [{"x-mcp-header": "No"}]},
        }});
        let found = headers_of(schema).unwrap();
        assert_eq!(
            found,
            [
                ("Region".into(), "region".into()),
                ("On".into(), "target.deep.on".into()),
                ("Zone".into(), "target.zone".into())
            ]
        );
        let arguments = json!({"target": {"zone": 3, "deep": null}});
        let params = input_schema_header_params(&json!({"properties": {"target": {"properties": {
            "zone": {"type": "integer", "x-mcp-header": "Zone"},
            "deep": {"properties": {"on": {"type": "boolean", "x-mcp-header": "On"}}},
        }}}}))
        .unwrap();
        let (on, zone) = (&params[0], &params[1]);
        assert_eq!(zone.value_in(&arguments), Some(&json!(3)));
        assert_eq!(on.value_in(&arguments), None, "a null on the way holds nothing");
        assert_eq!(zone.value_in(&json!({"target": "zone"})), None, "nor does a string");
    }

    #[test]
    fn annotations_anywhere_else_or_malformed_break_the_rules() {
        let at = |place: Value| headers_of(json!({"type": "object", "properties": {"a": place}}));
        let annotated = json!({"type": "string", "x-mcp-header": "A"});
        for hidden in [
            json!({"type": "array", "items": annotated}),
            json!({"type": "array", "prefixItems": [annotated]}),
            json!({"anyOf": [annotated]}),
            json!({"oneOf": [{"type": "null"}, annotated]}),
            json!({"allOf": [annotated]}),
            json!({"not": annotated}),
            json!({"if": annotated, "then": {}, "else": {}}),
            json!({"type": "object", "additionalProperties": annotated}),
            json!({"type": "object", "patternProperties": {"^x": annotated}}),
            json!({"$ref": "#/$defs/A", "$defs": {"A": annotated}}),
        ] {
            let error = at(hidden.clone()).unwrap_err();
            assert!(error.contains("through properties alone"), "{hidden}: {error}");
        }
        assert!(headers_of(json!({"type": "object", "x-mcp-header": "Root"})).is_err(), "not on the root");
        for (place, why) in [
            (json!({"type": "number", "x-mcp-header": "A"}), "needs a string, integer or boolean"),
            (json!({"type": "string", "x-mcp-header": "A B"}), "not an HTTP token"),
            (json!({"type": "string", "x-mcp-header": ""}), "not an HTTP token"),
            (json!({"type": "string", "x-mcp-header": 7}), "must be a string"),
        ] {
            let error = at(place.clone()).unwrap_err();
            assert!(error.contains(why), "{place}: {error}");
        }
        let twice = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "Region"},
            "b": {"type": "object", "properties": {"c": {"type": "string", "x-mcp-header": "region"}}},
        }});
        assert!(headers_of(twice).unwrap_err().contains("used twice"), "unique case-insensitively at any depth");
    }

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
