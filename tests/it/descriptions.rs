//! What a model reads is written for the model: tool, argument and resource descriptions say
//! what the model needs to call a tool well, and carry no implementation commentary (code spans,
//! Rust names, notes about the schema), which costs tokens on every listing and misleads.

use serde_json::Value;
use std::sync::Arc;
use vercel_mcp::state::SystemClock;
use vercel_mcp::{McpServer, Parts};

/// Words and marks that belong in Rust comments, not in text a model reads.
const IMPLEMENTATION_TEXT: &[&str] = &[
    "`",
    "::",
    "struct",
    "enum ",
    "impl ",
    "crate",
    "serde",
    "schemars",
    "Option<",
    "Vec<",
    "Arc<",
    "String",
    "schema",
    "enforced",
    "deliberately",
    "Arguments of",
    "Args",
];

/// Every example's tools, registered on one server.
fn everything() -> McpServer {
    let mut server = McpServer::new("all", "1");
    vercel_mcp::catalogue::register_all(&mut server, &Parts::for_tests(Arc::new(SystemClock)).services());
    server
}

/// What `/api/mcp` serves: `configure_server`, where a fork adds its own tools, which are held
/// to the same rules.
fn served() -> McpServer {
    let mut server = McpServer::new("served", "1");
    vercel_mcp::configure_server(&mut server, &Parts::for_tests(Arc::new(SystemClock)));
    server
}

/// Each description in a schema, with where it is.
fn descriptions(schema: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("description", Value::String(text)) => out.push((at.to_owned(), text.clone())),
                    _ => descriptions(value, &format!("{at}/{key}"), out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| descriptions(item, at, out)),
        _ => {}
    }
}

/// The problems of one text a model reads.
fn problems_of(at: &str, text: &str) -> Vec<String> {
    IMPLEMENTATION_TEXT
        .iter()
        .filter(|mark| text.contains(*mark))
        .map(|mark| format!("{at}: {mark:?} in {text:?}"))
        .collect()
}

fn problems(server: &McpServer) -> Vec<String> {
    let mut found = Vec::new();
    for tool in server.tools() {
        let name = &tool.name;
        match &tool.description {
            Some(text) => found.extend(problems_of(&format!("{name} description"), text)),
            None => found.push(format!("{name} has no description")),
        }
        if let Some(root) = tool.input_schema.get("description") {
            found.push(format!("{name} inputSchema has a root description {root}: the tool's description says it"));
        }
        let mut texts = Vec::new();
        descriptions(&tool.input_schema, &format!("{name} inputSchema"), &mut texts);
        if let Some(output) = &tool.output_schema {
            descriptions(output, &format!("{name} outputSchema"), &mut texts);
        }
        for (at, text) in texts {
            found.extend(problems_of(&at, &text));
        }
    }
    found
}

#[tokio::test]
async fn advertised_descriptions_are_written_for_the_model() {
    let server = everything();
    assert!(server.tools().len() >= 19, "every example's tools are checked");
    let mut found = problems(&server);
    found.extend(problems(&served()));
    let client = vercel_mcp::testing::client(server).await;
    for (method, key) in [("resources/list", "resources"), ("resources/templates/list", "resourceTemplates")] {
        let listed = client.request(method, serde_json::Map::new()).await.unwrap();
        let entries = listed[key].as_array().unwrap().clone();
        assert!(!entries.is_empty(), "{method} lists something to check");
        for entry in entries {
            let text = entry["description"].as_str().unwrap_or_default();
            found.extend(problems_of(&format!("{method} {}", entry["name"]), text));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_catches_implementation_text() {
    use schemars::JsonSchema;
    use vercel_mcp::server::ToolDef;

    /// Arguments of `lookup`.
    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct LookupArgs {
        /// Any JSON number, because the schema has already been enforced.
        limit: u32,
    }
    let mut server = McpServer::new("bad", "1");
    server.tool(ToolDef::new("lookup").description("Calls `Db::lookup`."), |_, _: LookupArgs| async { "x" });
    let found = problems(&server).join("\n");
    assert_eq!(server.tools()[0].input_schema.get("description"), None, "the type's doc comment is not advertised");
    assert!(found.contains("lookup description: \"`\""), "{found}");
    assert!(found.contains("lookup description: \"::\""), "{found}");
    assert!(found.contains("properties/limit: \"schema\""), "{found}");
    assert!(found.contains("properties/limit: \"enforced\""), "{found}");
}

/// Every argument a tool takes is bounded in its schema, so the validator rejects what is too
/// large before any handler runs (never truncating it): strings have a `maxLength` (or an `enum`),
/// numbers a `minimum` and a `maximum`, arrays a `maxItems`. `at` names where each one is.
fn unbounded(schema: &Value, at: &str, found: &mut Vec<String>) {
    let Value::Object(map) = schema else { return };
    let types: Vec<&str> = match map.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let has = |key: &str| map.contains_key(key);
    if !has("enum") && !has("const") {
        if types.contains(&"string") && !has("maxLength") {
            found.push(format!("{at}: a string without maxLength"));
        }
        if (types.contains(&"integer") || types.contains(&"number")) && !(has("minimum") && has("maximum")) {
            found.push(format!("{at}: a number without minimum and maximum"));
        }
        if types.contains(&"array") && !has("maxItems") {
            found.push(format!("{at}: an array without maxItems"));
        }
    }
    for (key, value) in map {
        match (key.as_str(), value) {
            ("properties" | "$defs", Value::Object(members)) => {
                for (name, member) in members {
                    unbounded(member, &format!("{at}.{name}"), found);
                }
            }
            ("items" | "additionalProperties", member) => unbounded(member, &format!("{at}[]"), found),
            ("anyOf" | "oneOf" | "allOf", Value::Array(branches)) => {
                branches.iter().for_each(|branch| unbounded(branch, at, found));
            }
            _ => {}
        }
    }
}

/// Arguments the examples' checklists declare unbounded (`{ message: string }`, "no bounds"):
/// the request body's limit is theirs.
const UNBOUNDED_BY_THE_EXAMPLES: &[&str] =
    &["echo.message: a string without maxLength", "summarize.text: a string without maxLength"];

#[test]
fn every_argument_of_every_tool_is_bounded() {
    let server = everything();
    let mut found = Vec::new();
    for tool in server.tools() {
        unbounded(&tool.input_schema, &tool.name, &mut found);
    }
    let mut on_the_endpoint = Vec::new();
    for tool in served().tools() {
        unbounded(&tool.input_schema, &tool.name, &mut on_the_endpoint);
    }
    for exempt in UNBOUNDED_BY_THE_EXAMPLES {
        assert!(found.contains(&exempt.to_string()), "{exempt}: no longer unbounded, so no longer exempt");
    }
    found.extend(on_the_endpoint);
    found.retain(|problem| !UNBOUNDED_BY_THE_EXAMPLES.contains(&problem.as_str()));
    assert!(found.is_empty(), "{}", found.join("\n"));
    let mut caught = Vec::new();
    let loose = serde_json::json!({"type": "object", "properties": {
        "s": {"type": "string"}, "n": {"type": ["integer", "null"], "minimum": 0},
        "a": {"type": "array", "items": {"type": "string", "maxLength": 3}}, "e": {"type": "string", "enum": ["x"]}}});
    unbounded(&loose, "loose", &mut caught);
    assert_eq!(caught.len(), 3, "the check catches what it names: {caught:?}");
}
