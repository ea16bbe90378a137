#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (whole libraries instrumented with ASan and
# coverage) in build-fuzz/ and runs each for SECONDS (default 60). New interesting inputs go
# to build-fuzz/fuzz/work-<target>/; a crash leaves crash-* there and makes this script fail:
# copy it into tests/fuzz/corpus/<name>/ as a regression seed once fixed.
#   tests/fuzz/run.sh [SECONDS] [rules|config|publish ...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SECONDS_EACH="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(rules config publish)
BUILD="${MCP_FUZZ_BUILD:-$ROOT/build-fuzz}"
FLAGS="-fsanitize=address -fsanitize=fuzzer-no-link -fno-omit-frame-pointer -g"

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DMCP_BUILD_BPF=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" >/dev/null
cmake --build "$BUILD" --target "${TARGETS[@]/#/fuzz_}" -j"$(nproc)"

status=0
for t in "${TARGETS[@]}"; do
  work="$BUILD/fuzz/work-$t"
  mkdir -p "$work"
  echo "fuzz: $t for ${SECONDS_EACH}s"
  # First corpus dir receives new inputs; the seed corpus in the tree is only read.
  if ! (cd "$work" && "$BUILD/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -max_len=8192 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 "$work" "$ROOT/tests/fuzz/corpus/$t"); then
    echo "fuzz: $t FAILED; reproducer(s): $(ls "$work"/crash-* "$work"/timeout-* "$work"/leak-* 2>/dev/null | tr '\n' ' ')"
    status=1
  fi
done
exit $status
