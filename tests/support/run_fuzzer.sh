#!/bin/sh
# run_fuzzer.sh FUZZER WORK_DIR DICT SECONDS SEED_DIR... — a bounded libFuzzer run for CTest.
# SECONDS is the target's own bound in CI; MXABLATE_FUZZ_SECONDS replaces it for a longer run
# by hand. A crash leaves its input as WORK_DIR/artifacts/crash-*.
set -eu
fuzzer=$1 work=$2 dict=$3 seconds=$4
shift 4
mkdir -p "$work/corpus" "$work/artifacts"
exec "$fuzzer" -max_total_time="${MXABLATE_FUZZ_SECONDS:-$seconds}" -timeout=10 \
  -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 -dict="$dict" \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$@"
