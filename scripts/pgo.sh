#!/usr/bin/env bash
# A profile for a profile-guided build (PGO): builds perf_server instrumented to count what its
# code does, sends it the harness's workloads on both edges (scripts/perf/pgo_train.py), and merges
# the counts into target/pgo/merged.profdata. A build given that profile lays out and inlines the
# code by how requests run it (docs/performance.md, "A profile-guided build"):
#
#   scripts/pgo.sh
#   RUSTFLAGS="-Cprofile-use=$PWD/target/pgo/merged.profdata" cargo build --release
#   RUSTFLAGS="-Cprofile-use=$PWD/target/pgo/merged.profdata" scripts/vercel-build.sh --build &&
#     vercel deploy --prebuilt
#
# Opt-in: the default build uses no profile. Rerun after changing the request path; a function
# changed since the profile was taken is built as without one (rustc warns), never wrongly.
# Needs wrk, and llvm-profdata of rustc's own LLVM major version (Debian: apt-get install -y
# llvm-<major>; `rustc -vV` names it). Redis at 127.0.0.1:6379 adds the job path to the profile.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=""
for candidate in "llvm-profdata-$major" "/usr/lib/llvm-$major/bin/llvm-profdata"; do
  if command -v "$candidate" >/dev/null; then profdata=$(command -v "$candidate"); break; fi
done
[ -n "$profdata" ] || {
  echo "pgo: llvm-profdata for LLVM $major (rustc's) is required: apt-get install -y llvm-$major" >&2
  exit 1
}
command -v wrk >/dev/null || { echo "pgo: wrk is required: apt-get install -y wrk" >&2; exit 1; }

echo "== building perf_server to profile (target/pgo-instrumented)"
# Build scripts and proc macros are instrumented too, and write their counts where they run; they
# go to a folder of their own, which nothing reads.
CARGO_TARGET_DIR=target/pgo-instrumented \
  RUSTFLAGS="-Cprofile-generate=$root/target/pgo-instrumented/build-profiles" \
  cargo build --release --quiet --example perf_server --example mint_token
rm -rf target/pgo
mkdir -p target/pgo/raw
echo "== training: the harness's workloads on both edges"
python3 scripts/perf/pgo_train.py target/pgo-instrumented/release/examples "$root/target/pgo/raw"
"$profdata" merge -o target/pgo/merged.profdata target/pgo/raw/*.profraw
# The profile must have counted this crate's request path, not only its dependencies: a training
# run that served nothing, or another binary, would otherwise pass unnoticed.
hot=$("$profdata" show --topn=200 target/pgo/merged.profdata | grep -c 'vercel_mcp' || true)
[ "$hot" -ge 20 ] || { echo "pgo: only $hot of the 200 most-run functions are this crate's" >&2; exit 1; }
echo "$hot of the 200 most-run functions are this crate's"
echo "== wrote target/pgo/merged.profdata; build with it:"
echo "RUSTFLAGS=\"-Cprofile-use=$root/target/pgo/merged.profdata\" cargo build --release"
