#!/usr/bin/env bash
# Instructions per request under callgrind, for the floor and our server: the one CPU figure
# that does not move with the machine's load (the harness's CPU microseconds drift by ±30% on
# shared cores, and these VMs expose no hardware counters to `perf stat`). Needs valgrind and wrk.
#   scripts/perf/instructions.sh [workload...]   (echo, list50, list50+jwt, echo+otel, progress10,
#   submit, poll; default: all but the last two, which need Redis on 127.0.0.1:6379)
# list50+jwt runs the server with authentication on and one RS256 token on every request, so its
# difference from list50 is what verifying a (cached) token costs. echo+otel runs it with tracing
# on (every request sampled), exporting over OTLP/HTTP once a second to a second floor process
# that accepts every POST; at callgrind's pace every span is exported, so the difference from
# echo is the whole cost of tracing a request, export included. submit is `submit_job` of a
# one-step job with the job store and queue (a stream) in Redis, so it includes running the job
# in the same process; poll is `get_job_status` of one job. Both count user-space instructions:
# what a Redis round trip costs in the kernel and in Redis is not in them.
# For echo it also counts examples/floor_json.rs (the floor plus JSON read into a `Value` and written
# from one) and examples/floor_typed.rs (the same read into and written from borrowed structs): what
# speaking JSON at all costs.
# With PERF_EDGE=vercel the server is the `vercel_runtime` edge (api/mcp.rs's path) rather than
# the local run (vercel_runtime listens on VERCEL_DEV_PORT, which is set with PORT).
# Builds a release perf_server with line tables and symbols in target/callgrind (the shipped
# profile strips them) so `callgrind_annotate target/callgrind/last.out` can show where they go.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
for tool in valgrind callgrind_control wrk curl jq; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install -y valgrind wrk curl jq)" >&2; exit 1; }
done
export CARGO_TARGET_DIR=target/callgrind CARGO_PROFILE_RELEASE_STRIP=none CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
cargo build --release --quiet --example perf_server --example floor --example floor_json --example floor_typed --example mint_token
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(echo list50 list50+jwt echo+otel progress10)
work=$(mktemp -d)
trap 'rm -rf "$work"; [ -n "${server:-}" ] && kill "$server" 2>/dev/null; [ -n "${sink:-}" ] && kill "$sink" 2>/dev/null
  [ -n "${redis_prefix:-}" ] && command -v redis-cli >/dev/null &&
    redis-cli --scan --pattern "$redis_prefix:*" | xargs -r -n 500 redis-cli del >/dev/null; true' EXIT

issuer=https://auth.example.com resource=http://localhost:3000/api/mcp
token=$(target/callgrind/release/examples/mint_token tests/fixtures/rsa_private.pem test-rsa-1 \
  "$issuer" "$resource" perf-user "mcp:read mcp:write" 3600)

request_file() { # name method params-json [mcp-name] [extra header]
  {
    printf 'Content-Type: application/json\nAccept: application/json, text/event-stream\n'
    printf 'MCP-Protocol-Version: 2026-07-28\nMcp-Method: %s\n' "$2"
    [ -n "${4:-}" ] && printf 'Mcp-Name: %s\n' "$4"
    [ -n "${5:-}" ] && printf '%s\n' "$5"
    printf '\n{"jsonrpc":"2.0","id":1,"method":"%s","params":%s}' "$2" "$3"
  } > "$work/$1.http"
}
meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
request_file echo tools/call "{\"name\":\"echo\",\"arguments\":{\"message\":\"hello\"},$meta}" echo
request_file list50 tools/list "{$meta}"
request_file list50+jwt tools/list "{$meta}" "" "Authorization: Bearer $token"
cp "$work/echo.http" "$work/echo+otel.http"
progress_meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"p"}'
request_file progress10 tools/call "{\"name\":\"progress10\",\"arguments\":{},$progress_meta}" progress10
request_file submit tools/call "{\"name\":\"submit_job\",\"arguments\":{\"steps\":1},$meta}" submit_job
request_file poll tools/call "{\"name\":\"get_job_status\",\"arguments\":{\"jobId\":\"none\"},$meta}" get_job_status
redis_prefix="perf-cg:$$"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

sink_port=$(free_port)
PORT="$sink_port" target/callgrind/release/examples/floor >/dev/null 2>&1 &
sink=$!

count() { # binary workload: sets $instructions to the instructions per request
  local port auth=()
  port=$(free_port)
  [[ "$2" == *+jwt ]] && auth=(MCP_AUTH_MODE=required "MCP_JWKS=$(cat tests/fixtures/jwks.json)"
    MCP_AUTH_ISSUER="$issuer" MCP_RESOURCE_URL="$resource")
  [[ "$2" == *+otel ]] && auth=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink_port" OTEL_TRACES_SAMPLER=always_on)
  [[ "$2" == submit || "$2" == poll ]] && auth=(REDIS_URL=redis://127.0.0.1:6379 MCP_REDIS_PREFIX="$redis_prefix"
    MCP_JOB_STEP_MS=0 MCP_JOB_CAP_ANONYMOUS=1000000 MCP_JOB_CAP_VERIFIED=1000000 MCP_MAX_JOBS_TOTAL=10000000
    MCP_JOB_SHARE=10000000 MCP_JOBS_PER_MINUTE=1000000)
  env "${auth[@]}" PORT="$port" VERCEL_DEV_PORT="$port" MCP_STATE_SECRET=perf=0123456789abcdef0123456789abcdef \
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.out" "$1" >/dev/null 2>&1 &
  server=$!
  local ready=
  for _ in $(seq 300); do
    kill -0 "$server" 2>/dev/null || { echo "$1 exited before listening" >&2; exit 1; }
    if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then ready=1; break; fi
    sleep 0.1
  done
  [ -n "$ready" ] || { echo "$1 did not listen on $port" >&2; exit 1; }
  if [ "$2" = poll ] && [[ "$1" != */floor ]]; then # a handle this server issued (the floor reads none)
    local handle
    handle=$(sed '1,/^$/d' "$work/submit.http" | curl -sf -H 'Content-Type: application/json' \
      -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
      -H 'Mcp-Method: tools/call' -H 'Mcp-Name: submit_job' --data-binary @- "http://127.0.0.1:$port/api/mcp" |
      jq -r '.result.content[0].text | fromjson | .jobId')
    request_file poll tools/call "{\"name\":\"get_job_status\",\"arguments\":{\"jobId\":\"$handle\"},$meta}" get_job_status
  fi
  PERF_REQUESTS="$work/$2.http" wrk -t1 -c1 -d2s -s scripts/perf/requests.lua "http://127.0.0.1:$port/api/mcp" >/dev/null
  callgrind_control -i on "$server" >/dev/null 2>&1
  local report requests
  report=$(PERF_REQUESTS="$work/$2.http" wrk -t1 -c1 -d8s -s scripts/perf/requests.lua "http://127.0.0.1:$port/api/mcp")
  if grep -q "Non-2xx" <<<"$report"; then echo "$1 refused $2 requests:"$'\n'"$report" >&2; exit 1; fi
  requests=$(awk '/requests in/ {print $1}' <<<"$report")
  callgrind_control -i off "$server" >/dev/null 2>&1
  callgrind_control -d "$server" >/dev/null 2>&1
  kill "$server"; wait "$server" 2>/dev/null || true; server=
  local total
  total=$(cat "$work"/cg.out* | awk '/^totals:/ {s += $2} END {print s + 0}')
  [ "${requests:-0}" -gt 0 ] && [ "$total" -gt 0 ] || { echo "no requests or no profile for $1" >&2; exit 1; }
  cp "$(ls "$work"/cg.out* | tail -1)" target/callgrind/last.out
  rm -f "$work"/cg.out*
  instructions=$((total / requests))
}

printf '| workload | floor instructions/request | our server instructions/request | × floor |\n|---|---|---|---|\n'
for workload in "${workloads[@]}"; do
  if [ "$workload" = echo ]; then # counted first, so that last.out is our server's profile
    count target/callgrind/release/examples/floor_json echo; json=$instructions
    count target/callgrind/release/examples/floor_typed echo; typed=$instructions
  fi
  count target/callgrind/release/examples/floor "$workload"; floor=$instructions
  count target/callgrind/release/examples/perf_server "$workload"; ours=$instructions
  printf '| %s | %d | %d | %s |\n' "$workload" "$floor" "$ours" "$(awk "BEGIN {printf \"%.2f\", $ours / $floor}")"
  [ "$workload" = echo ] && echo_floor=$floor
done
if [ -n "${json:-}" ]; then # what reading and writing JSON alone costs (floor_json.rs, floor_typed.rs)
  printf '\nThe floor plus JSON read and written, echo: into and from a `Value` (floor_json) %d instructions a request, %s× the floor; typed (floor_typed) %d, %s×.\n' \
    "$json" "$(awk "BEGIN {printf \"%.2f\", $json / $echo_floor}")" \
    "$typed" "$(awk "BEGIN {printf \"%.2f\", $typed / $echo_floor}")"
fi
