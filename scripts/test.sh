#!/usr/bin/env bash
# The project's test command: every unit and integration test, then the official
# conformance suite against the conformance fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --all-targets
scripts/conformance.sh
