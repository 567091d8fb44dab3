//! Replays every saved fuzz input through the same checks the fuzz targets run: the seed
//! corpus (`fuzz/corpus/<target>/`, which must not be empty) and every minimized crash a fuzz
//! run found (`fuzz/regressions/<target>/`), so a fixed crash stays fixed without libFuzzer in
//! the test command.

#[path = "../../fuzz/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut seeds = 0;
    for (kind, required) in [("corpus", true), ("regressions", false)] {
        let dir = root.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            assert!(!required, "{}: missing", dir.display());
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            check(&std::fs::read(&path).unwrap());
            seeds += usize::from(kind == "corpus");
        }
    }
    assert!(seeds > 0, "no seed inputs for {target}");
}

#[test]
fn request_pipeline() {
    replay("request_pipeline", harness::request_pipeline);
}

#[test]
fn header_value() {
    replay("header_value", harness::header_value);
}

#[test]
fn meta() {
    replay("meta", harness::meta);
}

#[test]
fn request_state() {
    replay("request_state", harness::request_state);
}

#[test]
fn job_handle() {
    replay("job_handle", harness::job_handle);
}

#[test]
fn queue_message() {
    replay("queue_message", harness::queue_message);
}

/// The `requestState` target's call is well-formed: without state it reaches the handler and is
/// asked for confirmation, so fuzzed states exercise the retry path rather than a schema error.
#[test]
fn the_request_state_target_reaches_the_mrtr_retry() {
    let app = harness::fresh_app();
    let first = harness::book_meeting(&app, None);
    assert!(first.contains("input_required") && first.contains("requestState"), "{first}");
    // The positive control for the target's oracle: the genuine state does book.
    let reply: serde_json::Value = serde_json::from_str(&first).expect("a JSON reply");
    let state = reply["result"]["requestState"].as_str().expect("a sealed state");
    assert!(harness::book_meeting(&app, Some(state)).contains("Booked:"));
    harness::request_state(state.as_bytes().get(..state.len() - 1).unwrap());
}

/// The structure-aware targets' forgeries are right but for the MAC: with the genuine key id and
/// tag the forgery is the genuine envelope (and the oracle allows it), so a verification that
/// skipped the MAC would let the fuzzer's first input through.
#[test]
fn a_forgery_differs_from_the_genuine_envelope_only_in_its_mac() {
    use base64::Engine;
    let sealer = vercel_mcp::state::Sealer::new(
        vec![("k1".into(), vec![7; 32])],
        std::sync::Arc::new(vercel_mcp::state::ManualClock::new(1_800_000_000_000)),
    )
    .unwrap();
    let genuine = vercel_mcp::jobs::handle::mint(&sealer, "caller", "AAAAAAAAAAAAAAAAAAAAAA");
    let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(genuine.rsplit('.').next().unwrap()).unwrap();
    let mut input = vec![0u8];
    input.extend_from_slice(&tag);
    assert_eq!(harness::forge(&genuine, &input), (genuine.clone(), true), "kid and tag from the input rebuild it");
    assert!(vercel_mcp::jobs::handle::open(&sealer, "caller", &genuine).is_some());
    harness::job_handle(&input); // the genuine envelope opens, and the oracle allows it
    let mut wrong = input.clone();
    wrong[1] ^= 1;
    let (forged, is_genuine) = harness::forge(&genuine, &wrong);
    assert!(!is_genuine && forged.rsplit_once('.').unwrap().0 == genuine.rsplit_once('.').unwrap().0);
    harness::job_handle(&wrong); // one bit off: must not open
}

/// Every `(name, version)` a `Cargo.lock` pins.
fn pinned(lock: &str) -> std::collections::BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(lock)).unwrap();
    let field = |package: &str, key: &str| {
        package
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(" = \"")?.strip_suffix('"').map(str::to_owned))
    };
    text.split("[[package]]")
        .skip(1)
        .map(|package| (field(package, "name").unwrap(), field(package, "version").unwrap()))
        .collect()
}

/// The fuzz crate has a lockfile of its own; what it fuzzes is the code the main build ships,
/// so every crate both use is pinned at the main lock's version there too (refresh it with
/// `cp Cargo.lock fuzz/Cargo.lock && (cd fuzz && cargo metadata --format-version 1 >/dev/null)`).
#[test]
fn the_fuzz_build_pins_the_main_builds_versions() {
    let main = pinned("Cargo.lock");
    let fuzz = pinned("fuzz/Cargo.lock");
    let main_names: std::collections::BTreeSet<&str> = main.iter().map(|(name, _)| name.as_str()).collect();
    let shared: Vec<_> = fuzz.iter().filter(|(name, _)| main_names.contains(name.as_str())).collect();
    assert!(
        shared.iter().any(|(name, _)| name == "redis"),
        "the fuzz lock shares no crates with the main one: {shared:?}"
    );
    let differing: Vec<_> = shared.into_iter().filter(|pin| !main.contains(*pin)).collect();
    assert!(differing.is_empty(), "fuzz/Cargo.lock pins versions the main lock does not: {differing:?}");
}
