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
use std::borrow::Cow;

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

/// Checks `value` against `schema` (whose root also resolves `$ref`s), as JSON Schema 2020-12
/// says. Returns the first violation as `path: problem`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    Validator { root: schema, lenient_root: false }.check(schema, value, &mut String::new(), 0)
}

/// [`validate`] for a tool's arguments: the top-level members that [`known_arguments`] will
/// drop are not held against the call (an `additionalProperties: false` at the root refuses
/// nothing it strips), so a stray `principal` is ignored rather than an error. Everything else,
/// nested `additionalProperties` included, is checked as [`validate`] checks it.
pub fn validate_arguments(schema: &Value, arguments: &Value) -> Result<(), String> {
    Validator { root: schema, lenient_root: true }.check(schema, arguments, &mut String::new(), 0)
}

/// Whether [`known_arguments`] drops the top-level member `name`: the root declares
/// `properties` without it, or allows no additional members at all.
fn stripped(schema: &Value, name: &str) -> bool {
    match schema.get("properties") {
        Some(Value::Object(properties)) => !properties.contains_key(name),
        _ => schema.get("additionalProperties") == Some(&Value::Bool(false)),
    }
}

/// The arguments without the top-level keys the root schema does not declare in `properties`
/// (when it declares any), or without every key when it allows none (`additionalProperties:
/// false`). Borrowed when nothing is dropped, which is every well-behaved call: the handler
/// then reads the request's own tree, with no copy. Anything but an object is returned as it is
/// (validation has refused it already).
pub fn known_arguments<'a>(schema: &Value, arguments: &'a Value) -> Cow<'a, Value> {
    let Value::Object(members) = arguments else { return Cow::Borrowed(arguments) };
    if !members.keys().any(|key| stripped(schema, key)) {
        return Cow::Borrowed(arguments);
    }
    let kept = members.iter().filter(|(key, _)| !stripped(schema, key));
    Cow::Owned(Value::Object(kept.map(|(key, value)| (key.clone(), value.clone())).collect()))
}

struct Validator<'a> {
    root: &'a Value,
    /// Top-level members that will be stripped are not checked (see [`validate_arguments`]).
    lenient_root: bool,
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

/// The enforced keywords of one schema object, gathered in a single pass over its keys: every
/// call visits each node of its tool's schema, and looking each keyword up separately walked the
/// map a dozen times per node.
#[derive(Default)]
struct Keywords<'a> {
    reference: Option<&'a Value>,
    types: Option<&'a Value>,
    enumeration: Option<&'a Value>,
    constant: Option<&'a Value>,
    min_length: Option<&'a Value>,
    max_length: Option<&'a Value>,
    pattern: Option<&'a Value>,
    minimum: Option<&'a Value>,
    maximum: Option<&'a Value>,
    exclusive_minimum: Option<&'a Value>,
    exclusive_maximum: Option<&'a Value>,
    multiple_of: Option<&'a Value>,
    min_items: Option<&'a Value>,
    max_items: Option<&'a Value>,
    unique_items: Option<&'a Value>,
    items: Option<&'a Value>,
    required: Option<&'a Value>,
    min_properties: Option<&'a Value>,
    max_properties: Option<&'a Value>,
    properties: Option<&'a Value>,
    additional_properties: Option<&'a Value>,
    all_of: Option<&'a Value>,
    any_of: Option<&'a Value>,
    one_of: Option<&'a Value>,
    not: Option<&'a Value>,
}

impl<'a> Keywords<'a> {
    fn of(map: &'a Map<String, Value>) -> Self {
        let mut keywords = Self::default();
        for (key, value) in map {
            let slot = match key.as_str() {
                "$ref" => &mut keywords.reference,
                "type" => &mut keywords.types,
                "enum" => &mut keywords.enumeration,
                "const" => &mut keywords.constant,
                "minLength" => &mut keywords.min_length,
                "maxLength" => &mut keywords.max_length,
                "pattern" => &mut keywords.pattern,
                "minimum" => &mut keywords.minimum,
                "maximum" => &mut keywords.maximum,
                "exclusiveMinimum" => &mut keywords.exclusive_minimum,
                "exclusiveMaximum" => &mut keywords.exclusive_maximum,
                "multipleOf" => &mut keywords.multiple_of,
                "minItems" => &mut keywords.min_items,
                "maxItems" => &mut keywords.max_items,
                "uniqueItems" => &mut keywords.unique_items,
                "items" => &mut keywords.items,
                "required" => &mut keywords.required,
                "minProperties" => &mut keywords.min_properties,
                "maxProperties" => &mut keywords.max_properties,
                "properties" => &mut keywords.properties,
                "additionalProperties" => &mut keywords.additional_properties,
                "allOf" => &mut keywords.all_of,
                "anyOf" => &mut keywords.any_of,
                "oneOf" => &mut keywords.one_of,
                "not" => &mut keywords.not,
                _ => continue,
            };
            *slot = Some(value);
        }
        keywords
    }
}

/// A bound keyword's value with the limit it sets, when it is a number of the right kind.
fn limit<T>(keyword: Option<&Value>, read: impl Fn(&Value) -> Option<T>) -> Option<(T, &Value)> {
    keyword.and_then(|value| read(value).map(|limit| (limit, value)))
}

impl<'a> Validator<'a> {
    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let pointer = decode_fragment(reference.strip_prefix('#')?)?;
        self.root.pointer(&pointer)
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
        let keywords = Keywords::of(map);
        if let Some(Value::String(reference)) = keywords.reference {
            let target = self.resolve(reference).ok_or_else(|| format!("{}: unresolvable $ref", at(path)))?;
            self.check(target, value, path, depth + 1)?;
        }
        match keywords.types {
            Some(Value::String(t)) if !type_matches(t, value) => {
                return Err(format!("{}: expected {t}, got {}", at(path), type_name(value)));
            }
            Some(Value::Array(types)) if !types.iter().any(|t| t.as_str().is_some_and(|t| type_matches(t, value))) => {
                let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
                return Err(format!("{}: expected {}, got {}", at(path), names.join(" or "), type_name(value)));
            }
            _ => {}
        }
        if let Some(Value::Array(options)) = keywords.enumeration {
            if !options.iter().any(|o| json_eq(o, value)) {
                return Err(format!("{}: must be one of {}", at(path), Value::Array(options.clone())));
            }
        }
        if let Some(expected) = keywords.constant {
            if !json_eq(expected, value) {
                return Err(format!("{}: must equal {expected}", at(path)));
            }
        }
        match value {
            Value::Number(n) => Self::check_number(&keywords, n.as_f64().unwrap_or(f64::NAN), path)?,
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if let Some((_, shown)) = limit(keywords.min_length, count_limit).filter(|(min, _)| len < *min) {
                    return Err(format!("{}: shorter than {shown} characters", at(path)));
                }
                if let Some((_, shown)) = limit(keywords.max_length, count_limit).filter(|(max, _)| len > *max) {
                    return Err(format!("{}: longer than {shown} characters", at(path)));
                }
                if let Some(Value::String(pattern)) = keywords.pattern {
                    if !pattern_matches(pattern, s) {
                        return Err(format!("{}: does not match the pattern {pattern}", at(path)));
                    }
                }
            }
            Value::Array(items) => self.check_array(&keywords, items, path, depth)?,
            Value::Object(object) => self.check_object(&keywords, object, path, depth)?,
            _ => {}
        }
        if let Some(Value::Array(all)) = keywords.all_of {
            for sub in all {
                self.check(sub, value, path, depth + 1)?;
            }
        }
        if let Some(Value::Array(any)) = keywords.any_of {
            if !any.iter().any(|sub| self.check(sub, value, &mut path.clone(), depth + 1).is_ok()) {
                return Err(format!("{}: does not match any allowed shape", at(path)));
            }
        }
        if let Some(Value::Array(one)) = keywords.one_of {
            let matches = one.iter().filter(|sub| self.check(sub, value, &mut path.clone(), depth + 1).is_ok()).count();
            if matches != 1 {
                return Err(format!("{}: must match exactly one allowed shape", at(path)));
            }
        }
        if let Some(not) = keywords.not {
            if self.check(not, value, &mut path.clone(), depth + 1).is_ok() {
                return Err(format!("{}: matches a forbidden shape", at(path)));
            }
        }
        Ok(())
    }

    fn check_number(keywords: &Keywords<'_>, n: f64, path: &str) -> Result<(), String> {
        let bound = |keyword| limit(keyword, Value::as_f64);
        if let Some((_, shown)) = bound(keywords.minimum).filter(|(min, _)| n < *min) {
            return Err(format!("{}: must be >= {shown}", at(path)));
        }
        if let Some((_, shown)) = bound(keywords.maximum).filter(|(max, _)| n > *max) {
            return Err(format!("{}: must be <= {shown}", at(path)));
        }
        if let Some((_, shown)) = bound(keywords.exclusive_minimum).filter(|(min, _)| n <= *min) {
            return Err(format!("{}: must be > {shown}", at(path)));
        }
        if let Some((_, shown)) = bound(keywords.exclusive_maximum).filter(|(max, _)| n >= *max) {
            return Err(format!("{}: must be < {shown}", at(path)));
        }
        if let Some((step, shown)) = bound(keywords.multiple_of).filter(|(step, _)| *step > 0.0) {
            let ratio = n / step;
            // An infinite quotient (a huge value, a tiny step) says nothing: refuse it.
            if !ratio.is_finite() || (ratio - ratio.round()).abs() > 1e-9 {
                return Err(format!("{}: must be a multiple of {shown}", at(path)));
            }
        }
        Ok(())
    }

    fn check_array(
        &self,
        keywords: &Keywords<'a>,
        items: &[Value],
        path: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        let len = items.len() as u64;
        if let Some((_, shown)) = limit(keywords.min_items, count_limit).filter(|(min, _)| len < *min) {
            return Err(format!("{}: fewer than {shown} items", at(path)));
        }
        if let Some((_, shown)) = limit(keywords.max_items, count_limit).filter(|(max, _)| len > *max) {
            return Err(format!("{}: more than {shown} items", at(path)));
        }
        if keywords.unique_items == Some(&Value::Bool(true)) {
            for (i, a) in items.iter().enumerate() {
                if items[..i].iter().any(|b| json_eq(a, b)) {
                    return Err(format!("{}: items must be unique", at(path)));
                }
            }
        }
        if let Some(item_schema) = keywords.items {
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
        keywords: &Keywords<'a>,
        object: &Map<String, Value>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        if let Some(Value::Array(required)) = keywords.required {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    let prefix = if path.is_empty() { String::new() } else { format!("{path}.") };
                    return Err(format!("{prefix}{name}: required"));
                }
            }
        }
        let count = object.len() as u64;
        if let Some((_, shown)) = limit(keywords.min_properties, count_limit).filter(|(min, _)| count < *min) {
            return Err(format!("{}: fewer than {shown} properties", at(path)));
        }
        if let Some((_, shown)) = limit(keywords.max_properties, count_limit).filter(|(max, _)| count > *max) {
            return Err(format!("{}: more than {shown} properties", at(path)));
        }
        let properties = match keywords.properties {
            Some(Value::Object(properties)) => Some(properties),
            _ => None,
        };
        let lenient = self.lenient_root && path.is_empty();
        let mut check_member = |name: &str, sub: &'a Value, child: &Value| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(name);
            let checked = self.check(sub, child, path, depth + 1);
            path.truncate(len);
            checked
        };
        if let Some(properties) = properties {
            for (name, sub) in properties {
                if let Some(child) = object.get(name) {
                    check_member(name, sub, child)?;
                }
            }
        }
        // Members `properties` does not name are checked against `additionalProperties` (a
        // schema, or `false` for none at all).
        if let Some(additional) = keywords.additional_properties {
            for (name, child) in object {
                let checked_elsewhere = properties.is_some_and(|p| p.contains_key(name));
                let dropped = lenient && stripped(self.root, name);
                if !checked_elsewhere && !dropped {
                    check_member(name, additional, child)?;
                }
            }
        }
        Ok(())
    }
}

/// Whether `text` matches `pattern` (JSON Schema patterns are unanchored ECMA-262 regular
/// expressions; `regex-lite` covers the syntax tool schemas use). Compiled patterns are cached;
/// a pattern that does not compile matches nothing, so validation fails closed. The lock is held
/// only to look up or insert: compiling and matching run outside it, so one long input does not
/// stall every other validation in the process. The cache is bounded (schemas are the server's
/// own, but a bound costs nothing); past it, patterns are compiled per use.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    const MAX_CACHED_PATTERNS: usize = 512;
    type Cache = HashMap<String, Option<Arc<regex_lite::Regex>>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    // Looked up by reference: the key is copied only when a pattern is cached. Two threads that
    // miss at once both compile it, which is harmless.
    let cached = cache.lock().expect("pattern cache").get(pattern).cloned();
    let compiled = match cached {
        Some(compiled) => compiled,
        None => {
            let compiled = regex_lite::Regex::new(pattern).ok().map(Arc::new);
            let mut cache = cache.lock().expect("pattern cache");
            if cache.len() < MAX_CACHED_PATTERNS {
                cache.insert(pattern.to_owned(), compiled.clone());
            }
            compiled
        }
    };
    compiled.is_some_and(|re| re.is_match(text))
}

/// JSON equality where `1` and `1.0` are equal.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(key, a)| y.get(key).is_some_and(|b| json_eq(a, b)))
        }
        _ => a == b,
    }
}

/// A count limit (`minLength`, `maxItems`, …): a non-negative integer, written `2` or `2.0`.
fn count_limit(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= u64::MAX as f64).map(|f| f as u64))
}

/// A `$ref` fragment as a JSON pointer: URI percent-escapes decoded (`%25` is `%`, `%22` is `"`).
fn decode_fragment(fragment: &str) -> Option<String> {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn additional_properties_hold_except_for_the_top_level_members_that_are_stripped() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "properties": {"inner": {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}}}});
        let stray = json!({"inner": {"a": "x", "b": 2}, "principal": "sub:admin"});
        assert!(validate(&schema, &stray).unwrap_err().contains("principal"), "the spec refuses the stray member");
        assert_eq!(validate_arguments(&schema, &stray), Ok(()), "a tool call strips it instead");
        assert_eq!(known_arguments(&schema, &stray).into_owned(), json!({"inner": {"a": "x", "b": 2}}));
        let nested = json!({"inner": {"b": "not an integer"}});
        for verdict in [validate(&schema, &nested), validate_arguments(&schema, &nested)] {
            assert!(verdict.unwrap_err().starts_with("inner.b: expected integer"), "nested members are checked");
        }
        let none = json!({"type": "object", "additionalProperties": false});
        let arguments = json!({"x": 1});
        assert_eq!(validate_arguments(&none, &arguments), Ok(()));
        assert!(
            known_arguments(&none, &arguments).as_object().unwrap().is_empty(),
            "a tool that takes nothing gets nothing"
        );
    }

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
    fn patterns_past_the_cache_bound_still_decide_correctly_and_bad_ones_fail_closed() {
        for n in 0..600 {
            let pattern = format!("^p{n}$");
            assert!(pattern_matches(&pattern, &format!("p{n}")), "{pattern}");
            assert!(!pattern_matches(&pattern, &format!("p{}", n + 1)), "{pattern}");
        }
        // Cached or not, an uncompilable pattern matches nothing.
        for _ in 0..2 {
            assert!(!pattern_matches("(unclosed", "(unclosed"));
        }
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
        let args = json!({"a":1,"principal":"admin"});
        assert_eq!(known_arguments(&schema, &args).into_owned(), json!({"a":1}));
        let known = json!({"a": 2});
        assert!(matches!(known_arguments(&schema, &known), Cow::Borrowed(_)), "nothing copied");
    }
}
