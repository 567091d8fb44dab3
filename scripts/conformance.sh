#!/usr/bin/env bash
# Runs the pinned official MCP conformance suite against the conformance fixture on loopback.
#
#   scripts/conformance.sh            # build the fixture, run every set, exit non-zero on any failure
#
# Sets run: the 2026-07-28 and 2025-11-25 requirement sets, the three pending 2026-07-28
# scenarios, the tasks extension scenarios, and the 2026-07-28 client scenarios that apply to
# this crate's client (examples/conformance_client.rs). Every run is judged against
# conformance/expected-failures.yml; the suite fails on a stale entry, so that list only shrinks.
set -euo pipefail
export NO_COLOR=1

root=$(cd "$(dirname "$0")/.." && pwd)
suite_dir="$root/conformance"
baseline="$suite_dir/expected-failures.yml"
results="${CONFORMANCE_RESULTS:-$root/target/conformance-results}"

cd "$suite_dir"
if [ ! -x node_modules/.bin/node ] || [ ! -f node_modules/@modelcontextprotocol/conformance/dist/index.js ]; then
  echo "== installing the pinned conformance suite and Node 22 (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
fi
node="$suite_dir/node_modules/.bin/node"
suite="$suite_dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
"$node" --version | grep -q '^v22\.' || { echo "conformance: Node 22 is required, got $("$node" --version)" >&2; exit 1; }

cd "$root"
echo "== building the conformance fixture and client"
cargo build --quiet --example conformance --example conformance_client
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/api/mcp"
log="$root/target/conformance-fixture.log"
PORT="$port" \
MCP_STATE_SECRET="conformance=$(python3 -c 'import secrets; print(secrets.token_hex(32))')" \
  "$root/target/debug/examples/conformance" >"$log" 2>&1 &
fixture=$!
trap 'kill "$fixture" 2>/dev/null || true' EXIT

for _ in $(seq 1 100); do
  if grep -q "listening on" "$log" 2>/dev/null; then break; fi
  if ! kill -0 "$fixture" 2>/dev/null; then cat "$log" >&2; echo "conformance: the fixture exited" >&2; exit 1; fi
  sleep 0.1
done
grep -q "listening on" "$log" || { cat "$log" >&2; echo "conformance: the fixture did not start" >&2; exit 1; }

status=0
run() {
  echo "== conformance: $*"
  if ! "$node" "$suite" server --url "$url" --expected-failures "$baseline" -o "$results" "$@" >"$results.last" 2>&1; then
    status=1
  fi
  if grep -q "=== SUMMARY ===" "$results.last"; then
    sed -n '/=== SUMMARY ===/,$p' "$results.last"
  else
    grep -E "^Passed:|Baseline|~ |Failed Checks|Error:" "$results.last" | sed 's/^/   /'
  fi
}
mkdir -p "$results"
run --requirements 2026-07-28
run --requirements 2025-11-25
for scenario in json-schema-2020-12 http-header-validation http-custom-header-server-validation; do
  run --scenario "$scenario" --spec-version 2026-07-28
done
for scenario in tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal \
  tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications \
  tasks-required-task-error tasks-mrtr-composition; do
  run --scenario "$scenario"
done

# Client scenarios: the suite starts its own servers and runs our client against them.
client_run() {
  echo "== conformance client: $*"
  if ! "$node" "$suite" client --command "$root/target/debug/examples/conformance_client" \
      --expected-failures "$baseline" -o "$results" "$@" >"$results.last" 2>&1; then
    status=1
  fi
  grep -E "^Passed:|Baseline|~ |Failed Checks|Error:" "$results.last" | sed 's/^/   /'
}
for scenario in tools_call request-metadata sep-2322-client-request-state http-standard-headers \
  http-custom-headers http-invalid-tool-headers json-schema-ref-no-deref; do
  client_run --scenario "$scenario" --spec-version 2026-07-28
done

if [ "$status" -ne 0 ]; then
  echo "conformance: FAILED (see the summaries above; results in $results)" >&2
  exit 1
fi
echo "conformance: all sets pass against the baseline"
