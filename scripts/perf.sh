#!/usr/bin/env bash
# The performance harness (one command, one run). Needs wrk (apt-get install -y wrk), chrt
# (util-linux) and, for the job workload, Redis at 127.0.0.1:6379. PERF_SECONDS (5) and PERF_CONNECTIONS (2) tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "installing wrk"; apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }; }
exec python3 scripts/perf/run.py
