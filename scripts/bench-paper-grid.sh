#!/usr/bin/env bash
# The paper grid through `mxablate run` on one GPU, timed end to end (target: <= 100 s on one
# H200, 242 s before the speed work): recipes/paper-grid-20m.yaml, 5 arms x 3 seeds of llama-20m,
# 8.2 M tokens each, a fresh results database and runs directory every time. Prints the wall
# time, the runs done, tokens/s over all runs, each next to its target, and `mxablate status`'s
# busy time per slot (train + eval + checkpoint, docs/design.md §9 "Busy slots") with where each
# slot's wall time went (training, evaluation, checkpoints, setup, idle).
#
# Usage: scripts/bench-paper-grid.sh DATA_DIR [extra `mxablate run` arguments]
#   DATA_DIR: a prepared data directory (the recipe's `default` dataset), e.g. data/default.
#   Extra arguments go to `mxablate run`, e.g. --no-prestart, or --per-gpu 2.
#   Env: MXABLATE_GPU_BUILD_DIR (default build-gpu: mxablate and mxablate-train for the GPU, built
#        there by scripts/gpu-env.sh's gpu_build where missing), MXABLATE_BENCH_GPU (default 0; a
#        list such as 0,1 spreads the grid over those GPUs, one slot each, for the busy-GPU
#        target), MXABLATE_BENCH_OUT (the database, run directories, logs; default a new
#        directory under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { echo "usage: scripts/bench-paper-grid.sh DATA_DIR [mxablate run arguments]" >&2; exit 2; }
DATA=$(realpath "$1")
shift
[ -f "$DATA/manifest.json" ] || { echo "bench-paper-grid: $DATA is not a prepared data directory" >&2; exit 2; }
BUILD_DIR=${MXABLATE_GPU_BUILD_DIR:-build-gpu}
GPU=${MXABLATE_BENCH_GPU:-0}
OUT=${MXABLATE_BENCH_OUT:-$(mktemp -d /tmp/mxablate-bench-paper-grid.XXXXXX)}
mkdir -p "$OUT"
source scripts/gpu-env.sh  # the carried libraries, the build, NCCL settings
gpu_build "$BUILD_DIR" "$OUT/build" mxablate mxablate-train || exit 1
MX=$BUILD_DIR/bin/mxablate
TRAIN=$BUILD_DIR/bin/mxablate-train
rm -rf "$OUT/runs" "$OUT/bench.db" "$OUT/bench.db-wal" "$OUT/bench.db-shm"  # a fresh sweep
DB=$OUT/bench.db

start=$(date +%s.%N)
set +e
MXABLATE_DEFAULT_DATASET=$DATA "$MX" run recipes/paper-grid-20m.yaml --db "$DB" --runs-dir "$OUT/runs" \
  --trainer "$TRAIN" --gpus "$GPU" --progress plain "$@" >"$OUT/run.out" 2>"$OUT/run.log"
rc=$?
set -e
end=$(date +%s.%N)
if [ "$rc" -ne 0 ]; then
  tail -20 "$OUT/run.log" >&2
  echo "bench-paper-grid: mxablate run exited $rc (log: $OUT/run.log)" >&2
fi
[ -f "$DB" ] || exit "$rc"

query() { "$MX" query --db "$DB" --csv "$1" | tail -n +2; }
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
done_runs=$(query "SELECT COUNT(*) FROM runs WHERE status IN ('converged', 'budget_exhausted')")
total_runs=$(query "SELECT COUNT(*) FROM runs")
tokens=$(query "SELECT COALESCE(SUM(tokens), 0) FROM runs")
echo "paper grid (recipes/paper-grid-20m.yaml) on GPU $GPU${*:+ with $*}: $OUT"
printf '  %-22s %10s s     target <= 100 s (242 s before the speed work)\n' "wall time" "$wall"
printf '  %-22s %10s\n' "runs done" "$done_runs / $total_runs"
awk -v t="$tokens" -v w="$wall" 'BEGIN { printf "  %-22s %10.0f       (%d tokens over the wall time)\n", "tokens/s, all runs", t / w, t }'
# Busy time per slot and where the wall time went, as `mxablate status` computes them (the one
# definition, docs/design.md §9 "Busy slots": train + eval + checkpoint over the union of the
# attempts' spans). Target: every slot busy >= 90 %.
printf '  %-22s target >= 90 %% per slot; mxablate status:\n' "busy"
"$MX" status --db "$DB" | sed -n '/^  busy:/,$p' || true
exit "$rc"
