#!/usr/bin/env bash
# The project's test command: every unit and integration test, then the official
# conformance suite against the conformance fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --all-targets 2>&1 | tee "$log"
scripts/conformance.sh
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i } }
     END { printf "cargo tests: %d passed, %d failed\n", p, f }' "$log"
