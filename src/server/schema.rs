//! Validation of tool arguments against the tool's advertised `inputSchema`.
//!
//! The schema a client sees and the check a call goes through are the same document: typed
//! tools get their schema from `schemars`, and this validator compiles that exact JSON once, on
//! the tool's first call ([`CompiledSchema`], [`LazySchema`]), and checks each call against it. It covers
//! the JSON Schema 2020-12 subset that `schemars` emits and that hand-written MCP schemas use;
//! [`unsupported_keywords`] lets registration refuse a typed schema that would need more, so
//! the advertised contract and the enforced one can never drift apart silently.
//!
//! Unknown object keys are not errors: top-level keys that neither the root's `properties` nor
//! one of its branches (`allOf`, `anyOf`, `oneOf`, `$ref`) declares are dropped before the
//! handler sees the arguments, unless the root allows additional properties (the reference
//! servers' tests depend on a stray `principal` argument being ignored).
//!
//! Checking costs at most a multiple of the value's size: an object's constant- or enum-valued
//! members are checked first (a tagged enum's tag decides its `oneOf` branch at once), and a
//! budget of checks per value node refuses what alternatives would still walk past it.

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

/// Gives each integer of a fixed width (`"format": "uint32"`, as schemars writes a Rust `u32`)
/// the bounds its width allows, where the schema sets none: the caller (and the model reading
/// the schema) learns the range from the schema, rather than from a Rust type name in the
/// error of a value the schema let through. 64-bit widths are left alone: their bounds are not
/// exact as the floats the bounds are compared as.
pub fn bound_integer_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let bounds = match map.get("format").and_then(Value::as_str) {
                Some("int8") => Some((i64::from(i8::MIN), i64::from(i8::MAX))),
                Some("int16") => Some((i64::from(i16::MIN), i64::from(i16::MAX))),
                Some("int32") => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
                Some("uint8") => Some((0, i64::from(u8::MAX))),
                Some("uint16") => Some((0, i64::from(u16::MAX))),
                Some("uint32") => Some((0, i64::from(u32::MAX))),
                _ => None,
            };
            if let Some((least, most)) = bounds {
                map.entry("minimum").or_insert(Value::from(least));
                map.entry("maximum").or_insert(Value::from(most));
            }
            map.values_mut().for_each(bound_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integer_formats),
        _ => {}
    }
}

/// Keywords in `schema` (at any depth) that the validator would not enforce; a `pattern` its
/// regular-expression engine cannot compile is one (it would fail every call), named with it.
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
            "pattern" if value.as_str().is_some_and(|p| regex_lite::Regex::new(p).is_err()) => {
                found.push(format!("pattern {value} (the regular-expression engine cannot compile it)"));
            }
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
/// says. Returns the first violation as `path: problem`. Compiles the schema for this one check:
/// a schema checked again and again (a tool's) is compiled once, as a [`CompiledSchema`].
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    CompiledSchema::new(schema).validate(value)
}

/// Where a node sits in [`CompiledSchema`]'s list.
type NodeId = usize;

/// A schema read once for checking: each enforced keyword in a typed slot, each `$ref` resolved
/// to the node it names, each `pattern` compiled. A tool's schemas are compiled once,
/// so a call walks this rather than the schema's JSON (which meant finding every keyword by name,
/// and every pattern in a shared cache, on every call). The schema's meaning is unchanged: the
/// same keywords are enforced with the same messages, and the listing still shows the JSON.
#[derive(Debug)]
pub struct CompiledSchema {
    /// Node 0 is the root.
    nodes: Vec<Node>,
    /// The root's rule for which top-level members a tool call drops.
    members: RootMembers,
}

#[derive(Debug)]
enum Node {
    /// `true`, or anything that is not an object (it constrains nothing).
    Anything,
    /// `false`.
    Nothing,
    Checks(Box<Checks>),
}

/// Which top-level members [`CompiledSchema::known_arguments`] keeps.
#[derive(Debug)]
enum RootMembers {
    /// Those the root's `properties` declares (sorted, for lookup).
    Declared(Vec<String>),
    /// None: no `properties`, and `additionalProperties: false`.
    NoneAllowed,
    /// All of them.
    All,
}

/// The enforced keywords of one schema object. A keyword whose value is not of the kind it
/// takes (a `minLength` of `"2"`, say) constrains nothing, as before compilation.
#[derive(Debug, Default)]
struct Checks {
    /// `$ref`: the node it names, or `None` when it names nothing (an error when checked).
    reference: Option<Option<NodeId>>,
    types: Option<Types>,
    /// `enum`, an array (kept whole: the message shows it).
    enumeration: Option<Value>,
    constant: Option<Value>,
    // Bounds: the limit, and the keyword's value as the message shows it.
    min_length: Option<(u64, Value)>,
    max_length: Option<(u64, Value)>,
    /// The pattern, and its compiled form (`None`: it does not compile, so nothing matches).
    pattern: Option<(String, Option<regex_lite::Regex>)>,
    minimum: Option<(f64, Value)>,
    maximum: Option<(f64, Value)>,
    exclusive_minimum: Option<(f64, Value)>,
    exclusive_maximum: Option<(f64, Value)>,
    /// Only a positive step constrains.
    multiple_of: Option<(f64, Value)>,
    min_items: Option<(u64, Value)>,
    max_items: Option<(u64, Value)>,
    unique_items: bool,
    items: Option<NodeId>,
    required: Vec<String>,
    min_properties: Option<(u64, Value)>,
    max_properties: Option<(u64, Value)>,
    /// In name order (a JSON object's), so a member is found by binary search.
    properties: Option<Vec<(String, NodeId)>>,
    /// Which of `properties` pin their value to a constant or a list of values: checked first.
    decisive: Vec<usize>,
    additional_properties: Option<NodeId>,
    all_of: Vec<NodeId>,
    any_of: Option<Vec<NodeId>>,
    one_of: Option<Vec<NodeId>>,
    not: Option<NodeId>,
}

/// `type`: one name, or a list of them (entries that are not strings never match).
#[derive(Debug)]
enum Types {
    One(String),
    AnyOf(Vec<String>),
}

/// Builds the nodes. A sub-schema is compiled once however often it is reached (by `$ref`s, or a
/// `$ref` to itself), so recursive schemas compile to a graph with cycles, not forever.
struct Compiler<'a> {
    root: &'a Value,
    nodes: Vec<Node>,
    compiled: std::collections::HashMap<*const Value, NodeId>,
}

impl<'a> Compiler<'a> {
    fn node(&mut self, schema: &'a Value) -> NodeId {
        let address: *const Value = schema;
        if let Some(&id) = self.compiled.get(&address) {
            return id;
        }
        let id = self.nodes.len();
        self.nodes.push(Node::Anything);
        self.compiled.insert(address, id);
        self.nodes[id] = match schema {
            Value::Bool(false) => Node::Nothing,
            Value::Object(map) => Node::Checks(Box::new(self.checks(map))),
            _ => Node::Anything,
        };
        id
    }

    /// Whether `node` pins its value to a constant or a list of values (one still being compiled,
    /// a recursive reference's, counts as not).
    fn is_decisive(&self, node: NodeId) -> bool {
        matches!(&self.nodes[node], Node::Checks(checks) if checks.constant.is_some() || checks.enumeration.is_some())
    }

    fn nodes_of(&mut self, value: &'a Value) -> Option<Vec<NodeId>> {
        value.as_array().map(|schemas| schemas.iter().map(|schema| self.node(schema)).collect())
    }

    fn checks(&mut self, map: &'a Map<String, Value>) -> Checks {
        let mut checks = Checks::default();
        let count = |value: &Value| count_limit(value).map(|limit| (limit, value.clone()));
        let bound = |value: &Value| value.as_f64().map(|limit| (limit, value.clone()));
        for (key, value) in map {
            match key.as_str() {
                "$ref" => {
                    if let Value::String(reference) = value {
                        // Local references only: `#` and a JSON pointer into the root.
                        let target = reference
                            .strip_prefix('#')
                            .and_then(decode_fragment)
                            .and_then(|pointer| self.root.pointer(&pointer));
                        checks.reference = Some(target.map(|target| self.node(target)));
                    }
                }
                "type" => {
                    checks.types = match value {
                        Value::String(name) => Some(Types::One(name.clone())),
                        Value::Array(names) => {
                            Some(Types::AnyOf(names.iter().filter_map(Value::as_str).map(str::to_owned).collect()))
                        }
                        _ => None,
                    }
                }
                "enum" => checks.enumeration = value.is_array().then(|| value.clone()),
                "const" => checks.constant = Some(value.clone()),
                "minLength" => checks.min_length = count(value),
                "maxLength" => checks.max_length = count(value),
                "pattern" => {
                    if let Value::String(pattern) = value {
                        checks.pattern = Some((pattern.clone(), regex_lite::Regex::new(pattern).ok()));
                    }
                }
                "minimum" => checks.minimum = bound(value),
                "maximum" => checks.maximum = bound(value),
                "exclusiveMinimum" => checks.exclusive_minimum = bound(value),
                "exclusiveMaximum" => checks.exclusive_maximum = bound(value),
                "multipleOf" => checks.multiple_of = bound(value).filter(|(step, _)| *step > 0.0),
                "minItems" => checks.min_items = count(value),
                "maxItems" => checks.max_items = count(value),
                "uniqueItems" => checks.unique_items = value == &Value::Bool(true),
                "items" => checks.items = Some(self.node(value)),
                "required" => {
                    checks.required =
                        value.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
                }
                "minProperties" => checks.min_properties = count(value),
                "maxProperties" => checks.max_properties = count(value),
                "properties" => {
                    if let Value::Object(properties) = value {
                        let mut compiled: Vec<(String, NodeId)> =
                            properties.iter().map(|(name, sub)| (name.clone(), self.node(sub))).collect();
                        // Found by binary search: sorted here, whatever order the map keeps.
                        compiled.sort_by(|(a, _), (b, _)| a.cmp(b));
                        checks.decisive = (0..compiled.len()).filter(|&i| self.is_decisive(compiled[i].1)).collect();
                        checks.properties = Some(compiled);
                    }
                }
                "additionalProperties" => checks.additional_properties = Some(self.node(value)),
                "allOf" => checks.all_of = self.nodes_of(value).unwrap_or_default(),
                "anyOf" => checks.any_of = self.nodes_of(value),
                "oneOf" => checks.one_of = self.nodes_of(value),
                "not" => checks.not = Some(self.node(value)),
                _ => {}
            }
        }
        checks
    }
}

impl CompiledSchema {
    /// Compiles `schema` (whose root also resolves `$ref`s).
    pub fn new(schema: &Value) -> Self {
        let mut compiler = Compiler { root: schema, nodes: Vec::new(), compiled: Default::default() };
        compiler.node(schema);
        let allows_more = schema.get("additionalProperties").is_some_and(|more| *more != Value::Bool(false));
        let mut declared = std::collections::BTreeSet::new();
        let members = match declared_members(schema, schema, &mut declared, 0) {
            // A root open to more members (a flattened map): any of them may be the handler's.
            _ if allows_more => RootMembers::All,
            true => RootMembers::Declared(declared.into_iter().collect()),
            false if schema.get("additionalProperties") == Some(&Value::Bool(false)) => RootMembers::NoneAllowed,
            false => RootMembers::All,
        };
        Self { nodes: compiler.nodes, members }
    }

    /// Checks `value`, as JSON Schema 2020-12 says. Returns the first violation as
    /// `path: problem`.
    pub fn validate(&self, value: &Value) -> Result<(), String> {
        Validator::new(self, false, value).check(0, value, &Path::Root, 0)
    }

    /// [`CompiledSchema::validate`] for a tool's arguments: the top-level members that
    /// [`CompiledSchema::known_arguments`] will drop are not held against the call (an
    /// `additionalProperties: false` at the root refuses nothing it strips), so a stray
    /// `principal` is ignored rather than an error. Everything else, nested
    /// `additionalProperties` included, is checked as `validate` checks it.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), String> {
        Validator::new(self, true, arguments).check(0, arguments, &Path::Root, 0)
    }

    /// Whether [`CompiledSchema::known_arguments`] drops the top-level member `name`: the root
    /// declares `properties` without it, or allows no additional members at all.
    fn drops(&self, name: &str) -> bool {
        match &self.members {
            RootMembers::Declared(names) => names.binary_search_by(|known| known.as_str().cmp(name)).is_err(),
            RootMembers::NoneAllowed => true,
            RootMembers::All => false,
        }
    }

    /// The arguments without the top-level keys the root schema does not declare in
    /// `properties` (when it declares any), or without every key when it allows none
    /// (`additionalProperties: false`). Borrowed when nothing is dropped, which is every
    /// well-behaved call: the handler then reads the request's own tree, with no copy. Anything
    /// but an object is returned as it is (validation has refused it already).
    pub fn known_arguments<'a>(&self, arguments: &'a Value) -> Cow<'a, Value> {
        let Value::Object(members) = arguments else { return Cow::Borrowed(arguments) };
        if !members.keys().any(|key| self.drops(key)) {
            return Cow::Borrowed(arguments);
        }
        let kept = members.iter().filter(|(key, _)| !self.drops(key));
        Cow::Owned(Value::Object(kept.map(|(key, value)| (key.clone(), value.clone())).collect()))
    }
}

/// A tool's schema, compiled the first time a call needs it: a cold instance compiles only the
/// schemas of the tools it is asked to run (a catalogue of fifty compiled at start-up cost ≈ 120k
/// instructions, 8% of the start-up of the harness's server).
#[derive(Debug)]
pub struct LazySchema {
    json: Value,
    compiled: std::sync::OnceLock<CompiledSchema>,
}

impl LazySchema {
    /// Holds `json` until it is first needed.
    pub fn new(json: Value) -> Self {
        Self { json, compiled: std::sync::OnceLock::new() }
    }

    /// The compiled schema (compiled now, if this is the first call).
    pub fn compiled(&self) -> &CompiledSchema {
        self.compiled.get_or_init(|| CompiledSchema::new(&self.json))
    }
}

struct Validator<'a> {
    schema: &'a CompiledSchema,
    /// Top-level members that will be stripped are not checked (see
    /// [`CompiledSchema::validate_arguments`]).
    lenient_root: bool,
    /// Checks left: a value is given a number in proportion to its size, so that no schema
    /// (alternatives that each walk the same nested value, say) makes checking it cost more than
    /// a fixed multiple of reading it. Past it, the value is refused as too complex. It starts at
    /// the floor, and the value's size is counted only if that runs out: most values never need it.
    budget: std::cell::Cell<u64>,
    /// The value being checked, until its size has been counted into the budget.
    uncounted: std::cell::Cell<Option<&'a Value>>,
}

/// Checks a value may take per node it has (see [`Validator::budget`]), and a floor.
const CHECKS_PER_NODE: u64 = 32;
const CHECKS_FLOOR: u64 = 1024;

/// Adds to `names` the members `schema` declares in `properties`, its own and those of the
/// alternatives and parts it is made of (`allOf`, `anyOf`, `oneOf`, and what `$ref` names within
/// `root`): a flattened enum's variants declare theirs there. Whether any `properties` was found.
fn declared_members(
    schema: &Value,
    root: &Value,
    names: &mut std::collections::BTreeSet<String>,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let mut found = false;
    if let Some(Value::Object(properties)) = schema.get("properties") {
        names.extend(properties.keys().cloned());
        found = true;
    }
    for keyword in ["allOf", "anyOf", "oneOf"] {
        for part in schema.get(keyword).and_then(Value::as_array).into_iter().flatten() {
            found |= declared_members(part, root, names, depth + 1);
        }
    }
    if let Some(target) = schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')) {
        if let Some(named) = root.pointer(target) {
            found |= declared_members(named, root, names, depth + 1);
        }
    }
    found
}

fn too_complex(path: &Path<'_>) -> String {
    format!("{path}: too complex to check against its schema")
}

/// How many values `value` holds, itself included.
fn nodes_of(value: &Value) -> u64 {
    match value {
        Value::Array(items) => 1 + items.iter().map(nodes_of).sum::<u64>(),
        Value::Object(members) => 1 + members.values().map(nodes_of).sum::<u64>(),
        _ => 1,
    }
}

impl<'a> Validator<'a> {
    fn new(schema: &'a CompiledSchema, lenient_root: bool, value: &'a Value) -> Self {
        let (budget, uncounted) = (std::cell::Cell::new(CHECKS_FLOOR), std::cell::Cell::new(Some(value)));
        Self { schema, lenient_root, budget, uncounted }
    }

    /// Whether the budget ran out (the value's size counted in, and spent).
    fn exhausted(&self) -> bool {
        self.budget.get() == 0 && self.uncounted.get().is_none()
    }

    /// Takes one check from the budget: false when none is left.
    fn spend(&self) -> bool {
        if self.budget.get() == 0 {
            let Some(value) = self.uncounted.take() else { return false };
            self.budget.set(nodes_of(value).saturating_mul(CHECKS_PER_NODE));
            if self.budget.get() == 0 {
                return false;
            }
        }
        self.budget.set(self.budget.get() - 1);
        true
    }
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

/// `value` with every whole number written as a float (`5.0`) written as an integer, when it has
/// one (`None` when nothing changed): JSON has one number type, and the schema takes `5.0` as the
/// integer 5, as JavaScript does; serde's integer fields do not, so a typed tool reads its
/// arguments again through this when they would not read as they came. Only floats that stand
/// for exactly one integer (within ±2^53) are changed.
pub(crate) fn whole_numbers_as_integers(value: &Value) -> Option<Value> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f.abs() <= EXACT).then(|| Value::from(f as i64))
        }
        Value::Array(items) => {
            let changed: Vec<Option<Value>> = items.iter().map(whole_numbers_as_integers).collect();
            changed.iter().any(Option::is_some).then(|| {
                Value::Array(
                    changed.into_iter().zip(items).map(|(new, old)| new.unwrap_or_else(|| old.clone())).collect(),
                )
            })
        }
        Value::Object(members) => {
            let changed: Vec<Option<Value>> = members.values().map(whole_numbers_as_integers).collect();
            changed.iter().any(Option::is_some).then(|| {
                Value::Object(
                    members
                        .iter()
                        .zip(changed)
                        .map(|((name, old), new)| (name.clone(), new.unwrap_or_else(|| old.clone())))
                        .collect(),
                )
            })
        }
        _ => None,
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match (expected, value) {
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        ("number", Value::Number(_)) => true,
        (other, value) => other == type_name(value),
    }
}

/// Where a checked value sits in the arguments (`items[2].name`), for error messages only: a
/// chain of borrowed steps on the stack. A call that passes builds no text; the path is written
/// out only when a check fails. Shown as `arguments` at the root.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    /// A member's name may be the client's (under `additionalProperties`), and the path goes
    /// back in the error: it is shown as long as any other echoed text, at most.
    Member(&'a Path<'a>, &'a str),
    Item(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn is_root(&self) -> bool {
        matches!(self, Path::Root)
    }

    /// Whether the steps write no text: the root, or members named `""` under it (the path of
    /// such a member reads as the root's).
    fn shows_nothing(&self) -> bool {
        match self {
            Path::Root => true,
            Path::Member(parent, name) => name.is_empty() && parent.shows_nothing(),
            Path::Item(..) => false,
        }
    }

    fn write_steps(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Member(parent, name) => {
                parent.write_steps(f)?;
                if !parent.shows_nothing() {
                    f.write_str(".")?;
                }
                f.write_str(&crate::protocol::error::truncate_for_message(name))
            }
            Path::Item(parent, index) => {
                parent.write_steps(f)?;
                write!(f, "[{index}]")
            }
        }
    }
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.shows_nothing() { f.write_str("arguments") } else { self.write_steps(f) }
    }
}

impl Validator<'_> {
    /// An alternative's refusal, unless the budget ran out while its branches were tried: then
    /// it is that, whatever the branches would have said.
    fn or_too_complex(&self, path: &Path<'_>, refusal: &str) -> String {
        if self.exhausted() { too_complex(path) } else { format!("{path}: {refusal}") }
    }

    fn check(&self, node: NodeId, value: &Value, path: &Path<'_>, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("{path}: schema nesting too deep"));
        }
        if !self.spend() {
            return Err(too_complex(path));
        }
        let checks = match &self.schema.nodes[node] {
            Node::Anything => return Ok(()),
            Node::Nothing => return Err(format!("{path}: no value is allowed here")),
            Node::Checks(checks) => checks,
        };
        if let Some(reference) = checks.reference {
            let target = reference.ok_or_else(|| format!("{path}: unresolvable $ref"))?;
            self.check(target, value, path, depth + 1)?;
        }
        match &checks.types {
            Some(Types::One(t)) if !type_matches(t, value) => {
                return Err(format!("{path}: expected {t}, got {}", type_name(value)));
            }
            Some(Types::AnyOf(types)) if !types.iter().any(|t| type_matches(t, value)) => {
                return Err(format!("{path}: expected {}, got {}", types.join(" or "), type_name(value)));
            }
            _ => {}
        }
        if let Some(options) = &checks.enumeration {
            if !options.as_array().into_iter().flatten().any(|o| json_eq(o, value)) {
                return Err(format!("{path}: must be one of {options}"));
            }
        }
        if let Some(expected) = &checks.constant {
            if !json_eq(expected, value) {
                return Err(format!("{path}: must equal {expected}"));
            }
        }
        match value {
            Value::Number(n) => Self::check_number(checks, n.as_f64().unwrap_or(f64::NAN), path)?,
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if let Some((_, shown)) = checks.min_length.as_ref().filter(|(min, _)| len < *min) {
                    return Err(format!("{path}: shorter than {shown} characters"));
                }
                if let Some((_, shown)) = checks.max_length.as_ref().filter(|(max, _)| len > *max) {
                    return Err(format!("{path}: longer than {shown} characters"));
                }
                if let Some((pattern, compiled)) = &checks.pattern {
                    // A pattern that does not compile matches nothing: validation fails closed.
                    if !compiled.as_ref().is_some_and(|re| re.is_match(s)) {
                        return Err(format!("{path}: does not match the pattern {pattern}"));
                    }
                }
            }
            Value::Array(items) => self.check_array(checks, items, path, depth)?,
            Value::Object(object) => self.check_object(checks, object, path, depth)?,
            _ => {}
        }
        for &sub in &checks.all_of {
            self.check(sub, value, path, depth + 1)?;
        }
        if let Some(any) = &checks.any_of {
            if !any.iter().any(|&sub| self.check(sub, value, path, depth + 1).is_ok()) {
                return Err(self.or_too_complex(path, "does not match any allowed shape"));
            }
        }
        if let Some(one) = &checks.one_of {
            // A second match settles it: the rest need not be walked.
            let matches = one.iter().filter(|&&sub| self.check(sub, value, path, depth + 1).is_ok()).take(2).count();
            if matches != 1 {
                return Err(self.or_too_complex(path, "must match exactly one allowed shape"));
            }
        }
        if let Some(not) = checks.not {
            match self.check(not, value, path, depth + 1) {
                Ok(()) => return Err(format!("{path}: matches a forbidden shape")),
                // A branch cut short by the budget says nothing: the value is refused for it.
                Err(_) if self.exhausted() => return Err(too_complex(path)),
                Err(_) => {}
            }
        }
        Ok(())
    }

    fn check_number(checks: &Checks, n: f64, path: &Path<'_>) -> Result<(), String> {
        if let Some((_, shown)) = checks.minimum.as_ref().filter(|(min, _)| n < *min) {
            return Err(format!("{path}: must be >= {shown}"));
        }
        if let Some((_, shown)) = checks.maximum.as_ref().filter(|(max, _)| n > *max) {
            return Err(format!("{path}: must be <= {shown}"));
        }
        if let Some((_, shown)) = checks.exclusive_minimum.as_ref().filter(|(min, _)| n <= *min) {
            return Err(format!("{path}: must be > {shown}"));
        }
        if let Some((_, shown)) = checks.exclusive_maximum.as_ref().filter(|(max, _)| n >= *max) {
            return Err(format!("{path}: must be < {shown}"));
        }
        if let Some((step, shown)) = &checks.multiple_of {
            let ratio = n / step;
            // An infinite quotient (a huge value, a tiny step) says nothing: refuse it.
            if !ratio.is_finite() || (ratio - ratio.round()).abs() > 1e-9 {
                return Err(format!("{path}: must be a multiple of {shown}"));
            }
        }
        Ok(())
    }

    fn check_array(&self, checks: &Checks, items: &[Value], path: &Path<'_>, depth: usize) -> Result<(), String> {
        let len = items.len() as u64;
        if let Some((_, shown)) = checks.min_items.as_ref().filter(|(min, _)| len < *min) {
            return Err(format!("{path}: fewer than {shown} items"));
        }
        if let Some((_, shown)) = checks.max_items.as_ref().filter(|(max, _)| len > *max) {
            return Err(format!("{path}: more than {shown} items"));
        }
        if checks.unique_items {
            // One canonical text per item, in a set: linear, where comparing every pair was
            // quadratic (two billion comparisons for an array at the body's value limit).
            let mut seen = std::collections::HashSet::with_capacity(items.len());
            for item in items {
                let mut key = String::new();
                canonical_text(item, &mut key);
                if !seen.insert(key) {
                    return Err(format!("{path}: items must be unique"));
                }
            }
        }
        if let Some(item_schema) = checks.items {
            for (i, item) in items.iter().enumerate() {
                self.check(item_schema, item, &Path::Item(path, i), depth + 1)?;
            }
        }
        Ok(())
    }

    fn check_object(
        &self,
        checks: &Checks,
        object: &Map<String, Value>,
        path: &Path<'_>,
        depth: usize,
    ) -> Result<(), String> {
        for name in &checks.required {
            if !object.contains_key(name) {
                return Err(if path.shows_nothing() {
                    format!("{name}: required")
                } else {
                    format!("{path}.{name}: required")
                });
            }
        }
        let count = object.len() as u64;
        if let Some((_, shown)) = checks.min_properties.as_ref().filter(|(min, _)| count < *min) {
            return Err(format!("{path}: fewer than {shown} properties"));
        }
        if let Some((_, shown)) = checks.max_properties.as_ref().filter(|(max, _)| count > *max) {
            return Err(format!("{path}: more than {shown} properties"));
        }
        let lenient = self.lenient_root && path.is_root();
        let check_member =
            |name: &str, sub: NodeId, child: &Value| self.check(sub, child, &Path::Member(path, name), depth + 1);
        if let Some(properties) = &checks.properties {
            // Members whose schema is a constant or a list of values first: they are cheap, and
            // they decide most alternatives (a tagged enum's tag), so a `oneOf` branch that does
            // not match fails before its other members are walked. In name order alone, nested
            // tagged unions cost time exponential in their depth.
            for &i in &checks.decisive {
                let (name, sub) = &properties[i];
                if let Some(child) = object.get(name) {
                    check_member(name, *sub, child)?;
                }
            }
            for (i, (name, sub)) in properties.iter().enumerate() {
                if !checks.decisive.contains(&i) {
                    if let Some(child) = object.get(name) {
                        check_member(name, *sub, child)?;
                    }
                }
            }
        }
        // Members `properties` does not name are checked against `additionalProperties` (a
        // schema, or `false` for none at all).
        if let Some(additional) = checks.additional_properties {
            for (name, child) in object {
                let declared = checks.properties.as_ref().is_some_and(|properties| {
                    properties.binary_search_by(|(known, _)| known.as_str().cmp(name)).is_ok()
                });
                let dropped = lenient && self.schema.drops(name);
                if !declared && !dropped {
                    check_member(name, additional, child)?;
                }
            }
        }
        Ok(())
    }
}

/// Appends a text for `value` that two values share exactly when [`json_eq`] calls them equal:
/// numbers by the value they denote ([`exact_number`]: `1`, `1.0` and `1e0` alike, `-0` as `0`,
/// integers past 2^53 exactly), members in name order (a `Map` keeps them sorted).
fn canonical_text(value: &Value, out: &mut String) {
    use std::fmt::Write;
    match value {
        // Short whatever the magnitude: `{}` writes 1e300 as three hundred digits.
        Value::Number(n) => match exact_number(n) {
            Ok(integer) => {
                let _ = write!(out, "{integer}");
            }
            Err(float) => {
                let _ = write!(out, "{float:e}");
            }
        },
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical_text(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (name, member) in members {
                let _ = write!(out, "{}:", Value::String(name.clone()));
                canonical_text(member, out);
                out.push(',');
            }
            out.push('}');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// JSON equality where `1` and `1.0` are equal.
/// The value a JSON number denotes: an integer exactly (1, 1.0 and 1e0 alike, and beyond 2^53,
/// where two integers share a float), any other as its float.
fn exact_number(n: &serde_json::Number) -> Result<i128, f64> {
    if let Some(integer) = n.as_i64() {
        return Ok(i128::from(integer));
    }
    if let Some(integer) = n.as_u64() {
        return Ok(i128::from(integer));
    }
    let float = n.as_f64().unwrap_or(f64::NAN);
    if float.fract() == 0.0 && float.abs() < 2f64.powi(100) { Ok(float as i128) } else { Err(float) }
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || exact_number(x) == exact_number(y),
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

    /// Members a handler's type declares through `#[serde(flatten)]` are kept: a flattened enum's
    /// variants declare theirs in the root's `oneOf`, and a flattened map opens the root to any.
    #[test]
    fn flattened_members_reach_the_handler() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[serde(tag = "kind")]
        #[allow(dead_code)]
        enum Mode {
            A { x: i64 },
            B { y: String },
        }
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct WithMode {
            name: String,
            #[serde(flatten)]
            mode: Mode,
        }
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct WithExtras {
            name: String,
            #[serde(flatten)]
            extras: std::collections::HashMap<String, Value>,
        }
        let with_mode = CompiledSchema::new(&schemars::schema_for!(WithMode).to_value());
        let call = json!({"name": "n", "kind": "A", "x": 1, "principal": "someone"});
        assert_eq!(with_mode.validate_arguments(&call), Ok(()));
        let kept = with_mode.known_arguments(&call);
        assert_eq!(*kept, json!({"name": "n", "kind": "A", "x": 1}), "the variant's members stay; a stray one goes");
        let mode: WithMode = serde_json::from_value(kept.into_owned()).expect("the handler's type reads them");
        assert!(matches!(mode.mode, Mode::A { x: 1 }));
        let with_extras = CompiledSchema::new(&schemars::schema_for!(WithExtras).to_value());
        let call = json!({"name": "n", "colour": "red"});
        assert_eq!(*with_extras.known_arguments(&call), call, "a flattened map keeps what it is given");
    }

    /// Numbers are the values they denote: integers beyond 2^53 stay apart (they share a float),
    /// 1 and 1.0 are one value, and a huge float has a short canonical text.
    #[test]
    fn numbers_compare_as_the_values_they_denote() {
        let unique = CompiledSchema::new(&json!({"type": "array", "uniqueItems": true}));
        assert_eq!(unique.validate(&json!([1234567890123456789u64, 1234567890123456790u64])), Ok(()));
        assert!(unique.validate(&json!([1, 1.0])).is_err());
        assert!(unique.validate(&json!([1e300, 1e300])).is_err());
        assert_eq!(unique.validate(&json!([1e300, 2e300, 0.5, -0.0, 1])), Ok(()));
        let constant = CompiledSchema::new(&json!({"const": 9007199254740993u64}));
        assert!(constant.validate(&json!(9007199254740992u64)).is_err(), "a neighbour is another integer");
        assert_eq!(constant.validate(&json!(9007199254740993u64)), Ok(()));
        let mut text = String::new();
        canonical_text(&json!([1.23e300, -0.0, 2.0, 0.25]), &mut text);
        assert_eq!(text, "[1.23e300,0,2,2.5e-1,]");
    }

    /// A filter language, as a fork might take one: a tagged union nested in itself.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(tag = "type")]
    #[allow(dead_code)]
    enum Filter {
        And { filters: Vec<Filter> },
        Or { filters: Vec<Filter> },
        Eq { field: String, value: String },
    }

    /// `{"type": kind, "filters": [inner, inner]}` nested `depth` times over `leaf`.
    fn nested(depth: usize, kind: &str, leaf: &Value) -> Value {
        (0..depth).fold(leaf.clone(), |inner, _| json!({"type": kind, "filters": [inner.clone(), inner]}))
    }

    /// Nested tagged unions are checked in time linear in the value: each `oneOf` branch whose
    /// tag does not match fails at the tag. Walked in name order, each level doubled the work,
    /// and these valid filters exceeded any budget proportional to their size.
    #[test]
    fn nested_tagged_unions_are_checked_in_linear_time() {
        let schema = CompiledSchema::new(&schemars::schema_for!(Filter).to_value());
        let leaf = json!({"type": "Eq", "field": "f", "value": "v"});
        for depth in [1, 6, 12] {
            let value = nested(depth, "And", &leaf);
            assert_eq!(schema.validate(&value), Ok(()), "depth {depth}");
        }
        let broken = nested(12, "Or", &json!({"type": "Eq", "field": "f", "value": 1}));
        let refused = schema.validate(&broken).unwrap_err();
        assert!(!refused.contains("too complex"), "refused on its merits: {refused}");
    }

    /// Alternatives that each walk the same nested value cannot make checking it cost more than
    /// a multiple of its size: past the budget, the value is refused as too complex.
    #[test]
    fn checking_is_bounded_by_the_size_of_the_value() {
        // Two untagged shapes that differ only at the leaf: every level tries both.
        let schema = CompiledSchema::new(&json!({"$defs": {"node": {"anyOf": [
            {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "end": {"const": 1}}},
            {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "end": {"const": 2}}}
        ]}}, "$ref": "#/$defs/node"}));
        let deep = (0..40).fold(json!({"end": 3}), |inner, _| json!({"next": inner}));
        let refused = schema.validate(&deep).unwrap_err();
        assert!(refused.contains("too complex to check"), "{refused}");
        let shallow = (0..3).fold(json!({"end": 1}), |inner, _| json!({"next": inner}));
        assert_eq!(schema.validate(&shallow), Ok(()));
    }

    #[test]
    fn additional_properties_hold_except_for_the_top_level_members_that_are_stripped() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "properties": {"inner": {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}}}});
        let stray = json!({"inner": {"a": "x", "b": 2}, "principal": "sub:admin"});
        let compiled = CompiledSchema::new(&schema);
        assert!(validate(&schema, &stray).unwrap_err().contains("principal"), "the spec refuses the stray member");
        assert_eq!(compiled.validate_arguments(&stray), Ok(()), "a tool call strips it instead");
        assert_eq!(compiled.known_arguments(&stray).into_owned(), json!({"inner": {"a": "x", "b": 2}}));
        let nested = json!({"inner": {"b": "not an integer"}});
        for verdict in [validate(&schema, &nested), compiled.validate_arguments(&nested)] {
            assert!(verdict.unwrap_err().starts_with("inner.b: expected integer"), "nested members are checked");
        }
        let none = CompiledSchema::new(&json!({"type": "object", "additionalProperties": false}));
        let arguments = json!({"x": 1});
        assert_eq!(none.validate_arguments(&arguments), Ok(()));
        assert!(
            none.known_arguments(&arguments).as_object().unwrap().is_empty(),
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
    fn unique_items_mean_what_json_equality_means() {
        let schema = json!({"type": "array", "uniqueItems": true});
        for repeated in
            [json!([1, 1.0]), json!([0, -0.0]), json!([{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}]), json!(["x", "x"])]
        {
            assert!(validate(&schema, &repeated).is_err(), "{repeated}");
        }
        for unique in
            [json!([1, 2, "1", [1], {"1": 1}, true, null]), json!([{"a": 1}, {"a": 1, "b": 1}]), json!(["a,", "a"])]
        {
            assert!(validate(&schema, &unique).is_ok(), "{unique}");
        }
        let many: Vec<u32> = (0..65_536).collect();
        assert!(validate(&schema, &json!(many)).is_ok(), "a long unique array passes");
        for (a, b) in [(json!(1), json!(1.0)), (json!({"a": [0]}), json!({"a": [-0.0]})), (json!("1"), json!(1))] {
            let (mut x, mut y) = (String::new(), String::new());
            canonical_text(&a, &mut x);
            canonical_text(&b, &mut y);
            assert_eq!(x == y, json_eq(&a, &b), "{a} {b}");
        }
    }

    #[test]
    fn whole_floats_read_as_integers_and_nothing_else_changes() {
        let given = json!({"a": 5.0, "b": [1.0, 2.5, "3.0"], "c": {"d": -0.0, "e": 7}, "f": 1e300});
        let whole = whole_numbers_as_integers(&given).expect("changed");
        assert_eq!(whole, json!({"a": 5, "b": [1, 2.5, "3.0"], "c": {"d": 0, "e": 7}, "f": 1e300}));
        assert!(whole["a"].is_i64() && whole["b"][1].is_f64());
        assert_eq!(whole_numbers_as_integers(&json!({"a": 5, "b": [2.5]})), None, "nothing to change");
    }

    #[test]
    fn a_member_name_the_client_chose_comes_back_truncated() {
        let schema = json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}});
        let long = "k".repeat(100_000);
        let problem = validate(&schema, &json!({"m": {long.as_str(): "x"}})).unwrap_err();
        assert!(problem.starts_with("m.kkkk") && problem.len() < 300, "{} bytes", problem.len());
        let nested = json!({"m": {long.as_str(): {"deeper": "x"}}});
        let schema = json!({"type": "object", "properties": {"m": {"type": "object",
            "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}}}}});
        let problem = validate(&schema, &nested).unwrap_err();
        assert!(
            problem.ends_with("….deeper: expected integer, got string"),
            "the rest of the path stays: {}",
            &problem[problem.len() - 60..]
        );
    }

    /// A path names each step as the client sent it, escaped: a member named `""` adds nothing
    /// (its errors read as its parent's), a control character in a name is written as an
    /// escape, and array items and `required` are placed the same way.
    #[test]
    fn error_paths_name_every_step_as_sent() {
        let schema = json!({"type": "object", "additionalProperties": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "list": {"type": "array", "items": {"type": "integer"}}},
            "required": ["n"],
        }});
        let cases = [
            (json!({"": {"n": "x"}}), "n: expected integer, got string"),
            (json!({"": {}}), "n: required"),
            (json!({"": 1}), "arguments: expected object, got integer"),
            (json!({"a\nb": {"n": 1, "list": [1, "x"]}}), "a\\nb.list[1]: expected integer, got string"),
            (json!({"a": {}}), "a.n: required"),
        ];
        for (value, expected) in cases {
            assert_eq!(validate(&schema, &value).unwrap_err(), expected, "{value}");
        }
    }

    #[test]
    fn resolves_local_refs() {
        let schema = json!({"type":"object","properties":{"p":{"$ref":"#/$defs/P"}},"$defs":{"P":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}});
        assert!(validate(&schema, &json!({"p":{"x":1}})).is_ok());
        assert_eq!(validate(&schema, &json!({"p":{}})).unwrap_err(), "p.x: required");
    }

    #[test]
    fn each_schema_keeps_its_own_patterns_and_a_bad_one_fails_closed() {
        let schemas: Vec<CompiledSchema> =
            (0..600).map(|n| CompiledSchema::new(&json!({"type": "string", "pattern": format!("^p{n}$")}))).collect();
        for (n, schema) in schemas.iter().enumerate() {
            assert_eq!(schema.validate(&json!(format!("p{n}"))), Ok(()));
            assert!(schema.validate(&json!(format!("p{}", n + 1))).is_err(), "{n}");
        }
        // A pattern that does not compile matches nothing, itself included.
        let broken = CompiledSchema::new(&json!({"type": "string", "pattern": "(unclosed"}));
        assert_eq!(
            broken.validate(&json!("(unclosed")).unwrap_err(),
            "arguments: does not match the pattern (unclosed"
        );
    }

    #[test]
    fn references_are_compiled_once_and_may_be_recursive() {
        let tree = json!({"$defs": {"node": {"type": "object", "properties": {
            "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"});
        let compiled = CompiledSchema::new(&tree);
        assert!(compiled.nodes.len() < 10, "each sub-schema once: {}", compiled.nodes.len());
        let ok = json!({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]});
        assert_eq!(compiled.validate(&ok), Ok(()));
        let bad = json!({"value": 1, "children": [{"value": 2, "children": [{"value": "three"}]}]});
        assert_eq!(compiled.validate(&bad).unwrap_err(), "children[0].children[0].value: expected integer, got string");
        let mut deep = json!({"value": 0});
        for _ in 0..(MAX_DEPTH + 1) {
            deep = json!({"children": [deep]});
        }
        assert!(compiled.validate(&deep).unwrap_err().ends_with("schema nesting too deep"));
        for unresolvable in ["#/$defs/missing", "other.json#/x", "#%zz"] {
            let schema = json!({"properties": {"p": {"$ref": unresolvable}}});
            assert_eq!(validate(&schema, &json!({"p": 1})).unwrap_err(), "p: unresolvable $ref", "{unresolvable}");
        }
    }

    /// A pattern the engine cannot compile is reported at registration (it would refuse every
    /// call); a fixed-width integer gets its width's bounds, so an out-of-range value is refused
    /// by the schema with its range, not by serde with a Rust type name.
    #[test]
    fn registration_names_uncompilable_patterns_and_bounds_fixed_width_integers() {
        let found =
            unsupported_keywords(&json!({"type":"object","properties":{"a":{"type":"string","pattern":"^(?=x)"}}}));
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("pattern \"^(?=x)\""), "{found:?}");
        assert!(unsupported_keywords(&json!({"type":"string","pattern":"^[a-z]+$"})).is_empty());
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Sizes {
            small: u8,
            count: u32,
            delta: Option<i32>,
            big: u64,
        }
        let mut schema = schemars::schema_for!(Sizes).to_value();
        bound_integer_formats(&mut schema);
        assert_eq!(schema["properties"]["count"]["maximum"], u32::MAX);
        assert_eq!(schema["properties"]["small"]["maximum"], 255);
        assert_eq!(schema["properties"]["delta"]["minimum"], i32::MIN);
        assert!(schema["properties"]["big"].get("maximum").is_none(), "64-bit bounds are not exact as floats");
        let refused = validate(&schema, &json!({"small": 1, "count": 5_000_000_000u64, "big": 1})).unwrap_err();
        assert_eq!(refused, "count: must be <= 4294967295");
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
        let schema = CompiledSchema::new(&json!({"type":"object","properties":{"a":{}}}));
        let args = json!({"a":1,"principal":"admin"});
        assert_eq!(schema.known_arguments(&args).into_owned(), json!({"a":1}));
        let known = json!({"a": 2});
        assert!(matches!(schema.known_arguments(&known), Cow::Borrowed(_)), "nothing copied");
    }
}
