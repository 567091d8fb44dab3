#!/usr/bin/env bash
# The real Vercel build, from exactly what `vercel deploy` would upload, then checked and run.
#
#   scripts/vercel-build.sh            # build, check .vercel/output, smoke the built functions
#   scripts/vercel-build.sh --build    # only build (then `vercel deploy --prebuilt`)
#
# 1. Installs the pinned Vercel CLI (tools/package-lock.json) on first use.
# 2. Asks the CLI which files a source deploy uploads (.vercelignore applied by the CLI itself)
#    and copies exactly those into a staging directory, so a file the build needs but the upload
#    leaves out fails here, not on Vercel.
# 3. Runs `VERCEL_BUILD_IMAGE=1 vercel build` there: with that variable the Rust builder runs
#    plain `cargo build --release --bin <name>` per function, as on Vercel's build machines
#    (without it, it cross-compiles with cargo-zigbuild: `pip install ziglang cargo-zigbuild`).
#    The staging directory's target/ is this checkout's, so dependencies built before are reused,
#    and the executables land where `vercel deploy --prebuilt` looks for them.
# 4. Copies .vercel/output here and runs scripts/vercel_output.py check and smoke.
# No Vercel account or login is needed: .vercel/project.json is a throwaway.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
only_build=false
[[ "${1:-}" == "--build" ]] && only_build=true
export VERCEL_TELEMETRY_DISABLED=1

if [[ ! -x "$root/tools/node_modules/.bin/vercel" ]]; then
  echo "== installing the pinned Vercel CLI (npm ci in tools/)"
  (cd "$root/tools" && npm ci --no-audit --no-fund --loglevel=error)
fi
vercel="$root/tools/node_modules/.bin/vercel"
"$vercel" --version 2>/dev/null | grep -q '^58\.10\.0' || { echo "vercel-build: expected Vercel CLI 58.10.0" >&2; exit 1; }

# A fixed staging path keeps cargo's fingerprints stable between runs.
stage="${TMPDIR:-/tmp}/vercel-mcp-stage-$(printf '%s' "$root" | cksum | cut -d' ' -f1)"
rm -rf "$stage"
mkdir -p "$stage/.vercel"
echo "== staging what a source deploy uploads"
node "$root/scripts/vercel/upload-files.mjs" "$root" source >"$stage.files"
count=0
while IFS= read -r file; do
  [[ "$file" == target || "$file" == target/* ]] && continue # the staging target/ is this checkout's (below)
  [[ -f "$root/$file" ]] || continue                            # files only: the tree lists empty folders too
  mkdir -p "$stage/$(dirname "$file")"
  cp -p "$root/$file" "$stage/$file"
  count=$((count + 1))
done <"$stage.files"
rm -f "$stage.files"
echo "$count files staged in $stage"
mkdir -p "$root/target"
ln -s "$root/target" "$stage/target"
printf '{"projectId":"prj_local_check","orgId":"team_local_check","settings":{"framework":null}}\n' >"$stage/.vercel/project.json"

started=$(date +%s)
# The builder runs one `cargo build --release --bin <name>` per function, one after another; the
# same command for all of them at once links two at a time on two cores, and leaves the builder's
# own runs nothing to do. The executables are the same either way.
bins=$(cd "$stage" && python3 - <<'PY'
import json, tomllib
functions = json.load(open("vercel.json"))["functions"]
bins = {b["path"]: b["name"] for b in tomllib.load(open("Cargo.toml", "rb"))["bin"]}
print(" ".join(f"--bin {bins[path]}" for path in functions))
PY
)
echo "== cargo build --release $bins"
# shellcheck disable=SC2086 # one word per flag
(cd "$stage" && cargo build --release --quiet $bins)
echo "== vercel build (VERCEL_BUILD_IMAGE=1)"
(cd "$stage" && VERCEL_BUILD_IMAGE=1 "$vercel" build --yes)
echo "vercel build took $(($(date +%s) - started)) s"
rm -rf "$root/.vercel/output"
mkdir -p "$root/.vercel"
cp -r "$stage/.vercel/output" "$root/.vercel/output"
rm -rf "$stage"

$only_build && exit 0
echo "== checking .vercel/output"
python3 "$root/scripts/vercel_output.py" check
echo "== running the built functions behind the output's routes"
python3 "$root/scripts/vercel_output.py" smoke
