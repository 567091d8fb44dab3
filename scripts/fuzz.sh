#!/usr/bin/env bash
# Runs every coverage-guided fuzz target for a fixed budget (seconds per target, default 60).
# Installs cargo-fuzz from crates.io when missing. The machine's stable toolchain builds the
# targets with RUSTC_BOOTSTRAP=1 and no sanitizer (the code under test is safe Rust; the
# property checks in fuzz/harness.rs are the oracle). A crash leaves its input in
# fuzz/artifacts/<target>/; minimize it and copy it to fuzz/regressions/<target>/, and
# tests/it/fuzz_regressions.rs replays it in every test run from then on (fuzz/regressions/README.md).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
budget="${1:-60}"
targets=(request_pipeline header_value meta request_state job_handle queue_message)
if ! cargo fuzz --version 2>/dev/null | grep -q '0\.13\.1'; then
  echo "== installing cargo-fuzz 0.13.1 from crates.io"
  cargo install cargo-fuzz --version 0.13.1 --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build --sanitizer none -O
status=0
for target in "${targets[@]}"; do
  mkdir -p "work-corpus/$target"
  echo "== fuzz $target for ${budget}s"
  if ! cargo fuzz run --sanitizer none -O "$target" "work-corpus/$target" "corpus/$target" -- \
      -max_total_time="$budget" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 2>"work-corpus/$target.log"; then
    echo "fuzz: $target found a crash; see fuzz/artifacts/$target/ and work-corpus/$target.log" >&2
    status=1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|^#[0-9]+.*DONE" "work-corpus/$target.log" || true
done
exit "$status"
