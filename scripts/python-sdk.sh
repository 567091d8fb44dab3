#!/usr/bin/env bash
# Runs python from a virtual environment in target/python-sdk that holds exactly
# tools/python-sdk.txt (the official MCP Python SDK and what it needs, pinned with hashes; made
# again when that file changes).
#
#   scripts/python-sdk.sh tests/sdk/python_client.py http://127.0.0.1:3000
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/target/python-sdk"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$root/tools/python-sdk.txt" "$venv/installed.txt"; then
  echo "== installing the pinned MCP Python SDK (pip --require-hashes)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --no-deps --require-hashes -r "$root/tools/python-sdk.txt"
  cp "$root/tools/python-sdk.txt" "$venv/installed.txt"
fi
exec "$venv/bin/python" "$@"
