#!/usr/bin/env bash
# The official MCP Python SDK (a 2026-07-28 client) against a running server:
# tests/sdk/python_client.py, run by scripts/python-sdk.sh.
#
#   scripts/sdk-client.sh http://127.0.0.1:3000
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "$root/scripts/python-sdk.sh" "$root/tests/sdk/python_client.py" "$@"
