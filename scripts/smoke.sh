#!/usr/bin/env bash
# Smoke test of a deployment (or the local run), end to end:
#
#   scripts/smoke.sh https://<deployment>.vercel.app/api/mcp [--bypass SECRET] [--token TOKEN] [--origin ORIGIN]
#
# See scripts/smoke.py for what it checks. Exits non-zero on any failed check.
set -euo pipefail
exec python3 "$(dirname "$0")/smoke.py" "$@"
