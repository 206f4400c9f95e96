#!/bin/sh
# run_fuzzer.sh FUZZER WORK_DIR DICT SEED_DIR... — a bounded libFuzzer run for CTest.
set -eu
fuzzer=$1 work=$2 dict=$3
shift 3
mkdir -p "$work/corpus" "$work/artifacts"
exec "$fuzzer" -max_total_time="${MXABLATE_FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 -dict="$dict" -artifact_prefix="$work/artifacts/" \
  "$work/corpus" "$@"
