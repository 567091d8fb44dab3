#!/usr/bin/env bash
# The bounded load test (examples/soak.rs) against the release local run with Redis at
# 127.0.0.1:6379 (SOAK_REDIS_URL overrides). Arguments: [seconds=20] [connections=4] [principals=4].
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin local --example soak
exec target/release/examples/soak target/release/local "${1:-20}" "${2:-4}" "${3:-4}"
