#!/usr/bin/env bash
# On the GPU machine (the device tool): graphed steps (docs/design.md §4, "Graphed steps") checked
# and timed in one call. Builds mxablate-train and the tests that cover them (as gpu-check.sh
# configures: CUDA kernels for sm_90, the image's torch, .carry/ packages), runs
#   - the GPU quantizer and LibTorch-adapter tests (the kernels read the step from device memory),
#   - the trainer's [gpu] cases (graphed runs bit-identical to eager ones, arm by arm),
# then the speed benchmark on llama-20m with every arm both graphed (auto) and eager, and the
# compiled PyTorch peer (gpu-speed-bench.sh --only llama-20m, MXABLATE_BENCH_EAGER=1).
# Logs under $OUT.
#
# With --grid, then the paper grid through `mxablate run` (bench-paper-grid.sh) once per
# argument set given (";"-separated, e.g. "--per-gpu 1;--per-gpu 2"), on GPUs $MXABLATE_BENCH_GPU
# (default 0) or those a set names before a colon ("0,1:--per-gpu 2"). With --profile, the benchmark also writes and summarizes a Kineto trace per arm.
#
#   scripts/gpu-graph-check.sh [--no-tests] [--no-bench] [--only MODEL] [--profile] [--grid ARGSETS]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/build-gpu/out}
BUILD=${MXABLATE_GPU_BUILD_DIR:-$ROOT/build-gpu}
TESTS=1 BENCH=1 ONLY=llama-20m PROFILE=() GRID=""
while [ $# -gt 0 ]; do
  case $1 in
    --no-tests) TESTS=0 ;;
    --no-bench) BENCH=0 ;;
    --only) ONLY=$2; shift ;;
    --profile) PROFILE=(--profile) ;;
    --grid) GRID=$2; shift ;;
    *) echo "gpu-graph-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
source scripts/gpu-env.sh  # PY, the carried packages, configure, NCCL settings
T0=$SECONDS

# The trainer, mxablate and the tests, configured once (gpu-env.sh's gpu_build).
source scripts/gpu-trainer-lib.sh
build_trainer "$BUILD" "$OUT/build"
echo "gpu-graph-check: mxablate-train built at $((SECONDS - T0)) s"
if [ "$TESTS" = 1 ]; then
  gpu_build "$BUILD" "$OUT/build-tests" trainer_run_test gpu_quantize_test gpu_torch_test || exit 1
  echo "gpu-graph-check: tests built at $((SECONDS - T0)) s"
  for t in gpu_quantize_test gpu_torch_test; do
    timeout 120 "$BUILD/bin/$t" >"$OUT/$t.log" 2>&1
    echo "  $t: exit $? ($(tail -2 "$OUT/$t.log" | tr '\n' ' '))"
  done
  (cd "$BUILD/tests/trainer/run" 2>/dev/null || cd "$BUILD"
   timeout 300 "$BUILD/bin/trainer_run_test" "${MXABLATE_GPU_TEST_FILTER:-[gpu]}" >"$OUT/trainer-gpu.log" 2>&1)
  echo "  trainer_run_test [gpu]: exit $? ($(tail -3 "$OUT/trainer-gpu.log" | tr '\n' ' '))"
  echo "gpu-graph-check: tests done at $((SECONDS - T0)) s"
fi
if [ "$BENCH" = 1 ]; then
  [ -d .carry/data-default ] || { echo "gpu-graph-check: .carry/data-default (a copy of data/default) is needed for the benchmark"; exit 2; }
  # The four arms graphs were measured in (the execution variants are the speed bench's, not
  # this check's); the peer in BF16 only unless MXABLATE_BENCH_PEER_ARMS names others
  # (bench_arms.py's names).
  MXABLATE_BENCH_EAGER=1 MXABLATE_BENCH_OUT=$OUT/speed MXABLATE_GPU_BUILD_DIR=$BUILD \
    bash scripts/gpu-speed-bench.sh .carry/data-default --only "$ONLY" --arms bf16,fp8,FDW,FDW+H16 \
      --peer-arms "${MXABLATE_BENCH_PEER_ARMS:-bf16}" "${PROFILE[@]}" 2>&1 | tee "$OUT/speed.log"
fi
if [ -n "$GRID" ]; then
  IFS=';' read -ra SETS <<<"$GRID"
  for i in "${!SETS[@]}"; do
    # A set that would start this late could not finish inside one 10-minute device call.
    if [ $((SECONDS - T0)) -gt "${MXABLATE_GRID_START_BY_S:-420}" ]; then
      echo "gpu-graph-check: grid set '${SETS[$i]}' skipped: $((SECONDS - T0)) s have passed"; continue
    fi
    set_gpus=${MXABLATE_BENCH_GPU:-0} set_args=${SETS[$i]}
    if [[ $set_args == *:* ]]; then set_gpus=${set_args%%:*}; set_args=${set_args#*:}; fi
    # shellcheck disable=SC2086  # each set is a list of mxablate run arguments
    MXABLATE_BENCH_GPU=$set_gpus MXABLATE_GPU_BUILD_DIR=$BUILD MXABLATE_BENCH_OUT=/tmp/grid-$i \
      bash scripts/bench-paper-grid.sh .carry/data-default $set_args 2>&1 |
      tee "$OUT/grid-$i.log"
  done
fi
echo "gpu-graph-check: done in $((SECONDS - T0)) s"
