#!/usr/bin/env bash
# A profile for a profile-guided build (PGO): builds the shipped executables `mcp` (api/mcp.rs) and
# `local` instrumented to count what their code does, sends them requests shaped like the harness's
# workloads (scripts/perf/pgo_train.py), and merges the counts into target/pgo/merged.profdata.
# A build given that profile lays out and inlines the code by how requests run it
# (docs/performance.md, "A profile-guided build"):
#
#   scripts/pgo.sh
#   RUSTFLAGS="-Cprofile-use=$PWD/target/pgo/merged.profdata" VERCEL_BUILD_IMAGE=1 vercel build
#   vercel deploy --prebuilt
#   RUSTFLAGS="-Cprofile-use=$PWD/target/pgo/merged.profdata" cargo build --release --bin local
#
# Vercel's Rust builder passes RUSTFLAGS on to its `cargo build --release --bin <name>`. Build in
# the checkout the profile was taken in, with the same toolchain and Cargo.lock.
#
# Opt-in: the default build uses no profile. Rerun after changing the request path; a function
# changed since the profile was taken is built as without one (rustc warns), never wrongly.
# Needs wrk, openssl (to sign the training's token), and the llvm-profdata of rustc's own LLVM
# major version (Debian: apt-get install -y llvm-<major>; `rustc -vV` names it). Redis at
# 127.0.0.1:6379 adds the job path to the profile.
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
for tool in wrk openssl; do
  command -v "$tool" >/dev/null || { echo "pgo: $tool is required: apt-get install -y $tool" >&2; exit 1; }
done

echo "== building mcp and local to profile (target/pgo-instrumented)"
# Built as a deploy builds them (`--bin`, no example or test in the same build, whose
# dev-dependency features would make other crates of the dependencies). Build scripts and proc
# macros are instrumented too, and write their counts where they run: a folder nothing reads.
CARGO_TARGET_DIR=target/pgo-instrumented \
  RUSTFLAGS="-Cprofile-generate=$root/target/pgo-instrumented/build-profiles" \
  cargo build --release --quiet --bin mcp --bin local
rm -rf target/pgo
mkdir -p target/pgo/raw
echo "== training: echo, listings, jobs, a token, on mcp and on local"
python3 scripts/perf/pgo_train.py target/pgo-instrumented/release "$root/target/pgo/raw"
"$profdata" merge -o target/pgo/merged.profdata target/pgo/raw/*.profraw
# The profile must have counted this crate's request path, not only its dependencies: a training
# run that served nothing, or another binary, would otherwise pass unnoticed.
hot=$("$profdata" show --topn=200 target/pgo/merged.profdata | grep -c 'vercel_mcp' || true)
[ "$hot" -ge 20 ] || { echo "pgo: only $hot of the 200 most-run functions are this crate's" >&2; exit 1; }
echo "$hot of the 200 most-run functions are this crate's"
echo "== wrote target/pgo/merged.profdata; build with it:"
echo "RUSTFLAGS=\"-Cprofile-use=$root/target/pgo/merged.profdata\" VERCEL_BUILD_IMAGE=1 vercel build"
