#!/usr/bin/env bash
# A real browser against the local run: tests/browser/cors.mjs in headless Chromium.
#
#   scripts/browser-test.sh [path to the local-run binary]   # default: a debug build of `local`
#
# Installs Debian's chromium with apt-get when it is missing, and playwright-core (pinned in
# tools/package-lock.json) to drive it; fails loudly when either cannot be had.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v chromium >/dev/null; then
  echo "== installing Debian's chromium (apt-get)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/tmp/browser-apt.log 2>&1; then
    cat /tmp/browser-apt.log >&2
    echo "browser-test: FAILED to install chromium with apt-get; the browser test cannot run" >&2
    exit 1
  fi
fi
if [[ ! -d tools/node_modules/playwright-core ]]; then
  echo "== installing the pinned tools (npm ci in tools/)"
  (cd tools && npm ci --no-audit --no-fund --loglevel=error)
fi
binary="${1:-}"
if [[ -z "$binary" ]]; then
  cargo build --quiet --bin local
  binary="$root/target/debug/local"
fi
CHROMIUM="$(command -v chromium)" node tests/browser/cors.mjs "$binary"
