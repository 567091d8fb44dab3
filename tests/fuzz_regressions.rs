//! Replays every saved fuzz input (`fuzz/regressions/<target>/*`: the seed corpus plus any
//! crash a fuzz run found) through the same checks the fuzz targets run, so a fixed crash stays
//! fixed without libFuzzer in the test command.

#[path = "../fuzz/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        check(&std::fs::read(&path).unwrap());
        count += 1;
    }
    assert!(count > 0, "no saved inputs for {target}");
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
    let first = harness::book_meeting(None);
    assert!(first.contains("input_required") && first.contains("requestState"), "{first}");
    // The positive control for the target's oracle: the genuine state does book.
    let reply: serde_json::Value = serde_json::from_str(&first).expect("a JSON reply");
    let state = reply["result"]["requestState"].as_str().expect("a sealed state");
    assert!(harness::book_meeting(Some(state)).contains("Booked:"));
    harness::request_state(state.as_bytes().get(..state.len() - 1).unwrap());
}
