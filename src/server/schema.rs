//! Validation of tool arguments against the tool's advertised `inputSchema`.
//!
//! The schema a client sees and the check a call goes through are the same document: typed
//! tools get their schema from `schemars`, and this validator walks that exact JSON. It covers
//! the JSON Schema 2020-12 subset that `schemars` emits and that hand-written MCP schemas use;
//! [`unsupported_keywords`] lets registration refuse a typed schema that would need more, so
//! the advertised contract and the enforced one can never drift apart silently.
//!
//! Unknown object keys are not errors: they are dropped before the handler sees the arguments
//! (the reference servers' tests depend on a stray `principal` argument being ignored).

use serde_json::{Map, Value};

/// Keywords that only annotate or that this validator enforces.
const KNOWN: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "definitions",
    "$ref",
    "title",
    "description",
    "default",
    "examples",
    "format",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "minProperties",
    "maxProperties",
    "pattern",
];

const MAX_DEPTH: usize = 64;

/// Keywords in `schema` (at any depth) that the validator would not enforce.
pub fn unsupported_keywords(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect_unsupported(schema, &mut found, 0);
    found.sort();
    found.dedup();
    found
}

fn collect_unsupported(schema: &Value, found: &mut Vec<String>, depth: usize) {
    let Value::Object(map) = schema else { return };
    if depth > MAX_DEPTH {
        return;
    }
    for (key, value) in map {
        if !KNOWN.contains(&key.as_str()) && !key.starts_with("x-") {
            found.push(key.clone());
        }
        match key.as_str() {
            "properties" | "$defs" | "definitions" => {
                if let Value::Object(children) = value {
                    children.values().for_each(|c| collect_unsupported(c, found, depth + 1));
                }
            }
            "items" | "not" | "additionalProperties" => collect_unsupported(value, found, depth + 1),
            "anyOf" | "oneOf" | "allOf" => {
                if let Value::Array(children) = value {
                    children.iter().for_each(|c| collect_unsupported(c, found, depth + 1));
                }
            }
            _ => {}
        }
    }
}

/// Checks `value` against `schema` (whose root also resolves `$ref`s). Returns the first
/// violation as `path: problem`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    Validator { root: schema }.check(schema, value, &mut String::new(), 0)
}

/// Removes keys not declared in the root schema's `properties` (when it declares any).
pub fn strip_unknown_keys(schema: &Value, arguments: &mut Map<String, Value>) {
    if let Some(Value::Object(properties)) = schema.get("properties") {
        arguments.retain(|key, _| properties.contains_key(key));
    }
}

struct Validator<'a> {
    root: &'a Value,
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match (expected, value) {
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        ("number", Value::Number(_)) => true,
        (other, value) => other == type_name(value),
    }
}

fn at(path: &str) -> &str {
    if path.is_empty() { "arguments" } else { path }
}

impl<'a> Validator<'a> {
    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    fn check(&self, schema: &'a Value, value: &Value, path: &mut String, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("{}: schema nesting too deep", at(path)));
        }
        let map = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{}: no value is allowed here", at(path))),
            Value::Object(map) => map,
            _ => return Ok(()),
        };
        if let Some(Value::String(reference)) = map.get("$ref") {
            let target = self.resolve(reference).ok_or_else(|| format!("{}: unresolvable $ref", at(path)))?;
            self.check(target, value, path, depth + 1)?;
        }
        match map.get("type") {
            Some(Value::String(t)) if !type_matches(t, value) => {
                return Err(format!("{}: expected {t}, got {}", at(path), type_name(value)));
            }
            Some(Value::Array(types)) if !types.iter().any(|t| t.as_str().is_some_and(|t| type_matches(t, value))) => {
                let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
                return Err(format!("{}: expected {}, got {}", at(path), names.join(" or "), type_name(value)));
            }
            _ => {}
        }
        if let Some(Value::Array(options)) = map.get("enum") {
            if !options.iter().any(|o| json_eq(o, value)) {
                return Err(format!("{}: must be one of {}", at(path), Value::Array(options.clone())));
            }
        }
        if let Some(expected) = map.get("const") {
            if !json_eq(expected, value) {
                return Err(format!("{}: must equal {expected}", at(path)));
            }
        }
        match value {
            Value::Number(n) => self.check_number(map, n.as_f64().unwrap_or(f64::NAN), path)?,
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if map.get("minLength").and_then(Value::as_u64).is_some_and(|min| len < min) {
                    return Err(format!("{}: shorter than {} characters", at(path), map["minLength"]));
                }
                if map.get("maxLength").and_then(Value::as_u64).is_some_and(|max| len > max) {
                    return Err(format!("{}: longer than {} characters", at(path), map["maxLength"]));
                }
                if let Some(Value::String(pattern)) = map.get("pattern") {
                    if !pattern_matches(pattern, s) {
                        return Err(format!("{}: does not match the pattern {pattern}", at(path)));
                    }
                }
            }
            Value::Array(items) => self.check_array(map, items, path, depth)?,
            Value::Object(object) => self.check_object(map, object, path, depth)?,
            _ => {}
        }
        if let Some(Value::Array(all)) = map.get("allOf") {
            for sub in all {
                self.check(sub, value, path, depth + 1)?;
            }
        }
        if let Some(Value::Array(any)) = map.get("anyOf") {
            if !any.iter().any(|sub| self.check(sub, value, &mut path.clone(), depth + 1).is_ok()) {
                return Err(format!("{}: does not match any allowed shape", at(path)));
            }
        }
        if let Some(Value::Array(one)) = map.get("oneOf") {
            let matches = one.iter().filter(|sub| self.check(sub, value, &mut path.clone(), depth + 1).is_ok()).count();
            if matches != 1 {
                return Err(format!("{}: must match exactly one allowed shape", at(path)));
            }
        }
        if let Some(not) = map.get("not") {
            if self.check(not, value, &mut path.clone(), depth + 1).is_ok() {
                return Err(format!("{}: matches a forbidden shape", at(path)));
            }
        }
        Ok(())
    }

    fn check_number(&self, map: &Map<String, Value>, n: f64, path: &str) -> Result<(), String> {
        let bound = |key: &str| map.get(key).and_then(Value::as_f64);
        if bound("minimum").is_some_and(|min| n < min) {
            return Err(format!("{}: must be >= {}", at(path), map["minimum"]));
        }
        if bound("maximum").is_some_and(|max| n > max) {
            return Err(format!("{}: must be <= {}", at(path), map["maximum"]));
        }
        if bound("exclusiveMinimum").is_some_and(|min| n <= min) {
            return Err(format!("{}: must be > {}", at(path), map["exclusiveMinimum"]));
        }
        if bound("exclusiveMaximum").is_some_and(|max| n >= max) {
            return Err(format!("{}: must be < {}", at(path), map["exclusiveMaximum"]));
        }
        if let Some(step) = bound("multipleOf").filter(|s| *s > 0.0) {
            let ratio = n / step;
            if (ratio - ratio.round()).abs() > 1e-9 {
                return Err(format!("{}: must be a multiple of {}", at(path), map["multipleOf"]));
            }
        }
        Ok(())
    }

    fn check_array(
        &self,
        map: &'a Map<String, Value>,
        items: &[Value],
        path: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        let len = items.len() as u64;
        if map.get("minItems").and_then(Value::as_u64).is_some_and(|min| len < min) {
            return Err(format!("{}: fewer than {} items", at(path), map["minItems"]));
        }
        if map.get("maxItems").and_then(Value::as_u64).is_some_and(|max| len > max) {
            return Err(format!("{}: more than {} items", at(path), map["maxItems"]));
        }
        if map.get("uniqueItems") == Some(&Value::Bool(true)) {
            for (i, a) in items.iter().enumerate() {
                if items[..i].iter().any(|b| json_eq(a, b)) {
                    return Err(format!("{}: items must be unique", at(path)));
                }
            }
        }
        if let Some(item_schema) = map.get("items") {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                self.check(item_schema, item, path, depth + 1)?;
                path.truncate(len);
            }
        }
        Ok(())
    }

    fn check_object(
        &self,
        map: &'a Map<String, Value>,
        object: &Map<String, Value>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        if let Some(Value::Array(required)) = map.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    let prefix = if path.is_empty() { String::new() } else { format!("{path}.") };
                    return Err(format!("{prefix}{name}: required"));
                }
            }
        }
        let count = object.len() as u64;
        if map.get("minProperties").and_then(Value::as_u64).is_some_and(|min| count < min) {
            return Err(format!("{}: fewer than {} properties", at(path), map["minProperties"]));
        }
        if map.get("maxProperties").and_then(Value::as_u64).is_some_and(|max| count > max) {
            return Err(format!("{}: more than {} properties", at(path), map["maxProperties"]));
        }
        if let Some(Value::Object(properties)) = map.get("properties") {
            for (name, sub) in properties {
                if let Some(child) = object.get(name) {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(name);
                    self.check(sub, child, path, depth + 1)?;
                    path.truncate(len);
                }
            }
        }
        Ok(())
    }
}

/// Whether `text` matches `pattern` (JSON Schema patterns are unanchored ECMA-262 regular
/// expressions; `regex-lite` covers the syntax tool schemas use). Compiled patterns are cached;
/// a pattern that does not compile matches nothing, so validation fails closed.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex_lite::Regex>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Mutex::default).lock().expect("pattern cache");
    // Looked up by reference first: the key is copied only the first time a pattern is seen.
    if let Some(compiled) = cache.get(pattern) {
        return compiled.as_ref().is_some_and(|re| re.is_match(text));
    }
    let compiled = regex_lite::Regex::new(pattern).ok();
    let matches = compiled.as_ref().is_some_and(|re| re.is_match(text));
    cache.insert(pattern.to_owned(), compiled);
    matches
}

/// JSON equality where `1` and `1.0` are equal.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_types_bounds_and_required() {
        let schema = json!({"type":"object","properties":{
            "message":{"type":"string","minLength":1,"maxLength":5},
            "count":{"type":"integer","minimum":1,"maximum":3},
            "tags":{"type":"array","items":{"type":"string"},"maxItems":2},
            "mode":{"enum":["a","b"]},
            "opt":{"type":["string","null"]}
        },"required":["message"]});
        assert!(validate(&schema, &json!({"message":"hi"})).is_ok());
        assert!(validate(&schema, &json!({"message":"hi","opt":null,"count":3,"tags":["x"]})).is_ok());
        assert_eq!(validate(&schema, &json!({})).unwrap_err(), "message: required");
        assert_eq!(validate(&schema, &json!({"message":42})).unwrap_err(), "message: expected string, got integer");
        assert!(validate(&schema, &json!({"message":""})).is_err());
        assert!(validate(&schema, &json!({"message":"toolong"})).is_err());
        assert!(validate(&schema, &json!({"message":"a","count":1.5})).is_err());
        assert!(validate(&schema, &json!({"message":"a","count":4})).is_err());
        assert!(validate(&schema, &json!({"message":"a","tags":["x",1]})).unwrap_err().contains("tags[1]"));
        assert!(validate(&schema, &json!({"message":"a","mode":"c"})).is_err());
        assert!(validate(&schema, &json!("not an object")).is_err());
    }

    #[test]
    fn resolves_local_refs() {
        let schema = json!({"type":"object","properties":{"p":{"$ref":"#/$defs/P"}},"$defs":{"P":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}});
        assert!(validate(&schema, &json!({"p":{"x":1}})).is_ok());
        assert_eq!(validate(&schema, &json!({"p":{}})).unwrap_err(), "p.x: required");
    }

    #[test]
    fn reports_unsupported_keywords_and_strips_unknown_keys() {
        assert_eq!(
            unsupported_keywords(&json!({"type":"object","properties":{"a":{"type":"string","if":{}}}})),
            ["if"]
        );
        let pattern = json!({"type":"string","pattern":"^inv-[0-9]+$"});
        assert!(validate(&pattern, &json!("inv-12")).is_ok());
        for bad in ["INV-1", "inv-", "inv-1; drop table", "1", "inv-1\n"] {
            assert!(validate(&pattern, &json!(bad)).is_err(), "{bad}");
        }
        assert!(unsupported_keywords(&json!({"type":"object","x-mcp-header":"A"})).is_empty());
        let schema = json!({"type":"object","properties":{"a":{}}});
        let mut args = json!({"a":1,"principal":"admin"}).as_object().unwrap().clone();
        strip_unknown_keys(&schema, &mut args);
        assert_eq!(Value::Object(args), json!({"a":1}));
    }
}
