#!/usr/bin/env bash
# Loopback benchmark of the local run and of the api/mcp.rs binary under vercel_runtime's local
# mode: cold start, requests/s and p50/p99 latency for tools/call (echo) and tools/list, RSS.
#   scripts/bench.sh [seconds] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin local --bin mcp --example loadgen
echo "machine: $(nproc) cores, $(grep MemTotal /proc/meminfo | awk '{print $2/1048576 " GiB"}'), $(uname -sr)"
ls -l target/release/local target/release/mcp | awk '{print "binary size: " $9 " " $5 " bytes"}'
for binary in target/release/local target/release/mcp; do
  echo
  target/release/examples/loadgen "$binary" "${1:-5}" "${2:-2}"
done
