#!/usr/bin/env bash
# The Rust client (through `mcp-host`) against the official MCP Python SDK as a 2025-11-25
# server that closes a call's stream halfway (tests/sdk/polling_server.py): the call answers only
# if the client resumes the stream with Last-Event-ID, and the server must have replayed events.
#
#   scripts/sdk-polling.sh target/debug/mcp-host
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
host=${1:?usage: scripts/sdk-polling.sh PATH-TO-mcp-host}
mkdir -p "$root/target"
log="$root/target/sdk-polling-server.log"
fail() { cat "$log" >&2 || true; echo "sdk-polling: FAILED: $1" >&2; exit 1; }
# The virtual environment first, so the wait below is for the server alone.
"$root/scripts/python-sdk.sh" -c 'import mcp'
"$root/scripts/python-sdk.sh" "$root/tests/sdk/polling_server.py" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.2
done
[ -n "$port" ] || fail "the Python SDK server did not start"
# The socket is bound before the line is printed; uvicorn starts accepting a moment later.
for _ in $(seq 1 50); do
  python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" 2>/dev/null && break
  sleep 0.1
done
answer=$("$host" --server py="http://127.0.0.1:$port/mcp" call py.slow '{}' --yes 2>&1) ||
  { echo "$answer" >&2; fail "the call through a closed stream did not answer"; }
grep -q '"text": "resumed"' <<<"$answer" || { echo "$answer" >&2; fail "unexpected answer"; }
grep -q '^replayed after ' "$log" || fail "the server replayed nothing: the stream was never resumed"
echo "sdk-polling: the call was answered after the client resumed its stream ($(grep -c '^replayed after ' "$log") replay)"
