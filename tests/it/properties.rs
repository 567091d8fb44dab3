//! Property tests over seeded random inputs (no sleeps, fixed seeds, so a failure reproduces
//! exactly): sealing and handle round trips hold, and every mutation, truncation, foreign
//! binding, wrong purpose or expiry is refused; the header codec round-trips any text; the
//! request parser's typed read means what a `Value` read means; the parsers and sanitisers never
//! panic and keep their output bounds whatever the input.

use serde_json::{Value, json};
use std::sync::Arc;

use vercel_mcp::catalogue::db_adapter::escape_control_chars;
use vercel_mcp::catalogue::sandbox_isolation::truncate_output;
use vercel_mcp::jobs::handle;
use vercel_mcp::jobs::queue::JobMessage;
use vercel_mcp::protocol::{McpError, Message};
use vercel_mcp::state::{ManualClock, Purpose, Random, SealError, Sealer, SeededRandom};
use vercel_mcp::transport::headers::{decode_value, encode_value};

const CASES: usize = 400;
const NOW: u64 = 1_800_000_000_000;

/// Random test values from a fixed seed.
struct Gen(SeededRandom);

impl Gen {
    fn new(seed: u64) -> Self {
        Self(SeededRandom::new(seed))
    }
    fn below(&self, n: usize) -> usize {
        let mut b = [0u8; 8];
        self.0.fill(&mut b);
        (u64::from_le_bytes(b) % n.max(1) as u64) as usize
    }
    fn bytes(&self, max: usize) -> Vec<u8> {
        let mut out = vec![0u8; self.below(max + 1)];
        self.0.fill(&mut out);
        out
    }
    /// Text mixing ASCII, controls, spaces, non-ASCII and astral characters.
    fn text(&self, max: usize) -> String {
        const POOL: &[char] = &[
            'a', 'Z', '0', ' ', '\t', '\n', '\r', '\u{0}', '\u{1b}', '\u{7f}', '=', '?', '.', '"', '\\', 'é', 'ж',
            '中', '\u{200b}', '\u{202e}', '😀', 'ａ',
        ];
        (0..self.below(max + 1)).map(|_| POOL[self.below(POOL.len())]).collect()
    }
    fn json(&self, depth: usize) -> Value {
        match self.below(if depth == 0 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => json!(self.below(1 << 20) as i64 - (1 << 19)),
            2 => json!(self.text(24)),
            3 => json!(self.below(2) == 1),
            4 => Value::Array((0..self.below(4)).map(|_| self.json(depth - 1)).collect()),
            _ => Value::Object((0..self.below(4)).map(|_| (self.text(8), self.json(depth - 1))).collect()),
        }
    }
    fn purpose(&self) -> Purpose {
        [Purpose::RequestState, Purpose::JobHandle, Purpose::Cursor, Purpose::LegacySession][self.below(4)]
    }
}

fn sealer(clock: &Arc<ManualClock>, keys: &[(&str, u8)]) -> Sealer {
    Sealer::new(keys.iter().map(|(id, fill)| (id.to_string(), vec![*fill; 32])).collect(), clock.clone()).unwrap()
}

/// One character of `s` replaced by a different URL-safe one.
fn mutate(g: &Gen, s: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.";
    let mut bytes = s.as_bytes().to_vec();
    let at = g.below(bytes.len());
    let mut replacement = ALPHABET[g.below(ALPHABET.len())];
    if replacement == bytes[at] {
        replacement = if bytes[at] == b'A' { b'B' } else { b'A' };
    }
    bytes[at] = replacement;
    String::from_utf8(bytes).unwrap()
}

#[test]
fn sealed_state_round_trips_and_nothing_else_opens() {
    let g = Gen::new(0x5EA1);
    let clock = Arc::new(ManualClock::new(NOW));
    let ring = sealer(&clock, &[("k1", 1)]);
    for _ in 0..CASES {
        let (purpose, data, binding) = (g.purpose(), g.json(3), g.bytes(40));
        let ttl = 1 + g.below(100_000) as u64;
        let sealed = ring.seal(purpose, &binding, ttl, data.clone());
        assert_eq!(ring.open(purpose, &binding, &sealed), Ok(data.clone()));

        let tampered = mutate(&g, &sealed);
        assert!(ring.open(purpose, &binding, &tampered).is_err(), "{sealed} -> {tampered} opened");
        let cut = &sealed[..g.below(sealed.len())];
        assert!(ring.open(purpose, &binding, cut).is_err());
        let mut other_binding = binding.clone();
        other_binding.push(g.bytes(1).first().copied().unwrap_or(0));
        assert_eq!(ring.open(purpose, &other_binding, &sealed), Err(SealError::BadSignature));
        let other_purpose = g.purpose();
        if other_purpose != purpose {
            assert_eq!(ring.open(other_purpose, &binding, &sealed), Err(SealError::BadSignature));
        }
    }
}

#[test]
fn expiry_rotation_and_foreign_keys() {
    let g = Gen::new(0xE7);
    let clock = Arc::new(ManualClock::new(NOW));
    let old = sealer(&clock, &[("k1", 1)]);
    let rotated = sealer(&clock, &[("k2", 2), ("k1", 1)]);
    let foreign = sealer(&clock, &[("k1", 9)]);
    let unrelated = sealer(&clock, &[("k3", 3)]);
    for _ in 0..CASES / 4 {
        let data = g.json(2);
        let ttl = 1 + g.below(10_000) as u64;
        let sealed = old.seal(Purpose::RequestState, b"p", ttl, data.clone());
        assert_eq!(rotated.open(Purpose::RequestState, b"p", &sealed), Ok(data.clone()), "old keys still open");
        assert_eq!(foreign.open(Purpose::RequestState, b"p", &sealed), Err(SealError::BadSignature));
        assert_eq!(unrelated.open(Purpose::RequestState, b"p", &sealed), Err(SealError::UnknownKey));
        clock.advance_ms(ttl);
        assert_eq!(old.open(Purpose::RequestState, b"p", &sealed), Err(SealError::Expired));
    }
}

#[test]
fn handles_open_only_for_their_owner_and_unchanged() {
    let g = Gen::new(0x4A4D);
    let clock = Arc::new(ManualClock::new(NOW));
    let ring = sealer(&clock, &[("k1", 1)]);
    for _ in 0..CASES {
        let job = handle::new_job_id(&g.0);
        assert!(handle::is_job_id(&job));
        let owner = g.text(30);
        let minted = handle::mint(&ring, &owner, &job);
        assert_eq!(handle::open(&ring, &owner, &minted).as_deref(), Some(job.as_str()));
        assert_eq!(handle::open(&ring, &format!("{owner}x"), &minted), None, "another principal");
        assert_eq!(handle::open(&ring, &owner, &mutate(&g, &minted)), None);
        let state = ring.seal(Purpose::RequestState, owner.as_bytes(), 60_000, json!(job));
        assert_eq!(handle::open(&ring, &owner, &state), None, "sealed state is not a handle");
    }
}

#[test]
fn header_values_round_trip_and_encode_to_visible_ascii() {
    let g = Gen::new(0x4EAD);
    for _ in 0..CASES * 2 {
        let value = g.text(40);
        let encoded = encode_value(&value);
        assert!(encoded.bytes().all(|b| (0x20..0x7f).contains(&b)), "{encoded:?}");
        assert!(http::HeaderValue::from_str(&encoded).is_ok());
        assert_eq!(decode_value(&encoded).unwrap(), value.as_str());
        // Arbitrary input never panics, and a successful decode is valid UTF-8 by type.
        let raw = String::from_utf8_lossy(&g.bytes(40)).into_owned();
        let _ = decode_value(&raw);
        let _ = decode_value(&format!("=?base64?{raw}?="));
    }
}

#[test]
fn queue_messages_parse_only_as_valid_jobs() {
    let g = Gen::new(0x0EE0);
    for _ in 0..CASES {
        let message = JobMessage {
            job_id: handle::new_job_id(&g.0),
            owner_id: format!("u{}", g.text(20)),
            steps: 1 + g.below(20) as u32,
            traceparent: None,
        };
        let body = serde_json::to_vec(&message).unwrap();
        assert_eq!(JobMessage::parse(&body).as_ref(), Some(&message));
        let mut mutated = body.clone();
        let at = g.below(mutated.len());
        mutated[at] = g.bytes(1).first().copied().unwrap_or(b'x');
        if let Some(parsed) = JobMessage::parse(&mutated) {
            assert!(
                handle::is_job_id(&parsed.job_id) && !parsed.owner_id.is_empty() && parsed.steps >= 1,
                "{parsed:?}"
            );
        }
        // Random bytes: the property is only that parsing returns instead of panicking.
        let _ = JobMessage::parse(&g.bytes(64));
    }
}

/// JSON text for a `params` member, written by hand so names can repeat (a `Value` cannot hold
/// that) and escapes can spell the names the parser looks for.
fn params_text(g: &Gen) -> String {
    const NAMES: &[&str] =
        &["name", "arguments", "uri", "cursor", "_meta", "\\u005fmeta", "\\u006eame", "progressToken", "x", ""];
    const META_NAMES: &[&str] = &[
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientCapabilities",
        "io.modelcontextprotocol/logLevel",
        "progressToken",
        "traceparent",
        "\\u0074raceparent",
        "other",
    ];
    let object = |names: &[&str], value: &dyn Fn() -> String| {
        let members: Vec<String> =
            (0..g.below(6)).map(|_| format!("\"{}\":{}", names[g.below(names.len())], value())).collect();
        format!("{{{}}}", members.join(","))
    };
    let value = || match g.below(4) {
        // A `_meta`-shaped object wherever one may land, and sometimes anything at all.
        0 => object(META_NAMES, &|| g.json(2).to_string()),
        _ => g.json(3).to_string(),
    };
    match g.below(8) {
        0 => g.json(2).to_string(),
        _ => object(NAMES, &value),
    }
}

#[test]
fn the_typed_request_read_means_what_the_value_read_means() {
    let g = Gen::new(0x9A7A);
    let value_read = |body: &[u8]| {
        serde_json::from_slice(body)
            .map_err(|_| McpError::parse_error("Parse error: body is not valid JSON").into())
            .and_then(Message::from_value)
    };
    let mut typed_requests = 0;
    for _ in 0..CASES * 5 {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}}"#, params_text(&g));
        let typed = Message::parse(body.as_bytes());
        assert_eq!(format!("{typed:?}"), format!("{:?}", value_read(body.as_bytes())), "{body}");
        typed_requests += usize::from(matches!(typed, Ok(Message::Request { .. })));
    }
    assert!(typed_requests > CASES, "most generated bodies are requests ({typed_requests})");
}

#[test]
fn sanitisers_leave_no_control_characters_and_respect_their_caps() {
    let g = Gen::new(0x5A1E);
    for _ in 0..CASES {
        let text = g.text(120);
        let escaped = escape_control_chars(&text);
        assert!(!escaped.chars().any(|c| c < ' ' || c == '\u{7f}'), "{escaped:?}");
        let cap = 1 + g.below(60);
        let truncated = truncate_output(&text, cap);
        assert!(!truncated.chars().any(|c| (c < ' ' && c != '\n' && c != '\t') || c == '\u{7f}'), "{truncated:?}");
        let kept = text.chars().filter(|&c| !((c < ' ' && c != '\n' && c != '\t') || c == '\u{7f}')).count();
        if kept <= cap {
            assert_eq!(truncated.chars().count(), kept);
        } else {
            let marker = format!("[truncated {} chars]", kept - cap);
            assert!(truncated.ends_with(&marker) && truncated.chars().count() == cap + marker.chars().count());
        }
    }
}

/// The official JSON-Schema-Test-Suite (draft 2020-12) for every keyword the validator claims to
/// enforce: each case whose schema stays within what the validator supports must get the
/// suite's verdict. Groups that need more (remote or `$id`-relative references, keywords the
/// validator does not know) are left out and counted; each file must still run cases, so a
/// filter that left out everything would fail. The suite is fetched by
/// `scripts/json-schema-suite.sh` (pinned by version and hash) when it is not there yet.
#[test]
fn the_official_json_schema_test_suite_passes_for_every_enforced_keyword() {
    use vercel_mcp::server::schema::{unsupported_keywords, validate};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/json-schema-test-suite/draft2020-12");
    if !dir.join("additionalProperties.json").is_file() {
        let fetched = std::process::Command::new(root.join("scripts/json-schema-suite.sh")).status();
        assert!(fetched.is_ok_and(|s| s.success()), "scripts/json-schema-suite.sh could not fetch the suite");
    }
    fn outside_subset(schema: &Value) -> bool {
        let text = schema.to_string();
        !unsupported_keywords(schema).is_empty()
            || ["\"$id\"", "\"$anchor\"", "\"$dynamicRef\"", "\"$dynamicAnchor\""].iter().any(|k| text.contains(k))
            || text.split("\"$ref\":\"").skip(1).any(|rest| !rest.starts_with("#"))
    }
    let keywords = [
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
        "pattern",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "ref",
    ];
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for keyword in keywords {
        let path = dir.join(format!("{keyword}.json"));
        let groups: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let (mut ran, mut left_out) = (0, 0);
        for group in groups.as_array().unwrap() {
            let schema = &group["schema"];
            let tests = group["tests"].as_array().unwrap();
            if outside_subset(schema) {
                left_out += tests.len();
                continue;
            }
            for case in tests {
                ran += 1;
                let verdict = validate(schema, &case["data"]);
                if verdict.is_ok() != case["valid"].as_bool().unwrap() {
                    failures
                        .push(format!("{keyword}: {} / {}: {verdict:?}", group["description"], case["description"]));
                }
            }
        }
        assert!(ran > 0, "{keyword}.json: no case ran");
        summary.push(format!("{keyword} {ran}/{}", ran + left_out));
    }
    eprintln!("JSON-Schema-Test-Suite cases run: {}", summary.join(", "));
    assert!(failures.is_empty(), "{} cases disagree with the suite:\n{}", failures.len(), failures.join("\n"));
}
