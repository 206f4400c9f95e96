#!/usr/bin/env bash
# On the GPU machine (the device tool): build the whole project against the image's torch with
# the CUDA kernels, run every test (the GPU tests included) and the benchmark, write the logs
# under $OUT, and print a short table last. Designed to finish well inside one 10-minute call.
#
#   scripts/gpu-check.sh            build + tests + benchmark
#   scripts/gpu-check.sh --no-bench build + tests
#
# What the image lacks travels in .carry/ (ignored by git; name it in the call's `carry`):
#   .carry/debs/*.deb   packages unpacked here with dpkg -x into .carry/prefix: Debian's
#                       libsqlite3-dev and libsqlitecpp-dev (the image has SQLite's runtime but
#                       no header), and Ubuntu noble's libboost-{filesystem,atomic,system}1.83
#                       (-dev and runtime; the image has Boost 1.83 headers only). On the dev
#                       machine: (cd .carry/debs && apt-get download libsqlite3-dev
#                       libsqlitecpp-dev), and the Boost ones with apt-get download pointed at
#                       a noble sources list (see docs/performance.md, "Reproducing").
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# Carried packages, paths, python, configure: scripts/gpu-env.sh (shared by every GPU script).
source "$ROOT/scripts/gpu-env.sh"
OUT=${OUT:-$ROOT/build-gpu/out}
BUILD=${MXABLATE_GPU_BUILD_DIR:-$ROOT/build-gpu}
JOBS=${MXABLATE_JOBS:-$(nproc)}
RUN_BENCH=1
[ "${1:-}" = "--no-bench" ] && RUN_BENCH=0
mkdir -p "$OUT" "$BUILD"
T0=$(date +%s)
declare -a SUMMARY

step() {  # step NAME LOG COMMAND…: runs, logs, records status and seconds
  local name=$1 log=$2
  shift 2
  local t=$(date +%s)
  "$@" >"$OUT/$log" 2>&1
  local rc=$?
  SUMMARY+=("$(printf '| %-28s | %-6s | %4ss | %s |' "$name" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(( $(date +%s) - t ))" "$log")")
  return $rc
}

# 1. Environment: what we build against, recorded with the results.
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -1
  g++ --version | head -1
  cmake --version | head -1
  "$PY" -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda)'
  for p in yaml-cpp fmt spdlog sentencepiece sqlite3; do
    printf '%s: ' "$p"; pkg-config --modversion "$p" 2>/dev/null || echo "not found by pkg-config"
  done
} >"$OUT/environment.txt" 2>&1

# The default corpus, when carried, for the end-to-end sweep test (it skips without one).
if [ -d "$ROOT/.carry/data-default" ] && [ ! -e "$ROOT/data/default" ]; then
  mkdir -p "$ROOT/data" && ln -s ../.carry/data-default "$ROOT/data/default"
fi

# 3. Configure and build the whole tree (gpu_build goes on past a failing target; its full log
# is $OUT/build.build.log, build.log holds the tail of a failure).
step "configure" configure.log gpu_configure "$BUILD" "$OUT/cmake-configure.log"
step "build (-j$JOBS)" build.log gpu_build "$BUILD" "$OUT/build"
BUILD_RC=$?
# Run what did build even when something else did not.
[ -x "$BUILD/bin/gpu_quantize_test" ] && BUILD_RC=0

# 4. GPU tests, 5. the benchmark, 6. every other test: in that order of importance, each
# bounded so the whole script stays inside one 10-minute device call.
left() { echo $(( ${MXABLATE_GPU_CHECK_BUDGET_S:-540} - ($(date +%s) - T0) )); }
if [ $BUILD_RC -eq 0 ]; then
  step "ctest: GPU tests" ctest-gpu.log timeout 240 ctest --test-dir "$BUILD" -L gpu --output-on-failure
fi
if [ $BUILD_RC -eq 0 ] && [ $RUN_BENCH -eq 1 ] && [ -x "$BUILD/bin/mxablate-bench" ]; then
  step "mxablate-bench" bench.log timeout 200 "$BUILD/bin/mxablate-bench" --markdown "$OUT/bench.md"
fi
if [ $BUILD_RC -eq 0 ] && [ "$(left)" -gt 30 ]; then
  step "ctest: all other tests" ctest-other.log timeout "$(left)" ctest --test-dir "$BUILD" -LE gpu \
    --output-on-failure -j 8 --timeout 120
fi

# 7. Summary: failures' tails first, the table last.
for log in configure.log build.log ctest-gpu.log ctest-other.log bench.log; do
  if [ -f "$OUT/$log" ] && grep -qE "(FAIL|Error|error:|failed)" "$OUT/$log"; then
    echo "---- $log (tail) ----"
    grep -E "(FAILED|Failed|error:|Error|failed|SKIPPED|REQUIRE|CHECK|with expansion|tests passed)" "$OUT/$log" | tail -n 25
  fi
done
[ -f "$OUT/bench.md" ] && cat "$OUT/bench.md"
echo
echo "| step | status | time | log (under \$OUT) |"
echo "|---|---|---|---|"
printf '%s\n' "${SUMMARY[@]}"
grep -h "tests passed\|tests failed" "$OUT"/ctest-*.log 2>/dev/null | sed 's/^/  /'
echo "total $(( $(date +%s) - T0 ))s"
