#!/usr/bin/env bash
# The speed benchmark of docs/design.md §9 (issue 14), for the GPU machine. In one run it measures
#   - the baselines: BF16 cuBLAS at 8192³ and device copy bandwidth (gpu_baselines.py);
#   - our trainer, mxablate-train, on llama-20m (seq 256, 16,384 tokens/step) and llama-125m
#     (seq 512, 65,536 tokens/step as 4 micro-batches) in BF16, FP8, MXFP4 F+D+W and F+D+W+H16
#     (median tokens/s of the train events after step 3; peak GPU memory from run_end);
#   - the compiled PyTorch peer on the same shapes and arms (peer_llama.py);
# then prints the table and every target with the baseline it divides by (speed-report.py).
#
# Usage: scripts/gpu-speed-bench.sh DATA_DIR [--no-peer] [--profile] [--only MODEL]
#   --profile  also writes a Kineto trace of steps 6-8 of each of our runs and prints
#              profile-summary.py's tables (the profiled run is separate from the timed one)
#   Env: MXABLATE_GPU_BUILD_DIR (default build-gpu, shared with gpu-check.sh), MXABLATE_BENCH_OUT
#        (default /tmp/mxablate-speed), MXABLATE_BENCH_STEPS (default 30), MXABLATE_BENCH_EAGER=1
#        (each of our runs also with train.cuda_graphs: off, as ours-MODEL-ARM-eager),
#        MXABLATE_BENCH_PEER_ARMS (default "bf16 fp8 fdw fdw+h16").
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=$(realpath "${1:?usage: gpu-speed-bench.sh DATA_DIR [--no-peer] [--profile] [--only MODEL]}")
shift
PEER=1 PROFILE=0 ONLY=""
while [ $# -gt 0 ]; do
  case $1 in
    --no-peer) PEER=0 ;;
    --profile) PROFILE=1 ;;
    --only) ONLY=$2; shift ;;
    *) echo "gpu-speed-bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
BUILD_DIR=${MXABLATE_GPU_BUILD_DIR:-build-gpu}
OUT=${MXABLATE_BENCH_OUT:-/tmp/mxablate-speed}
STEPS=${MXABLATE_BENCH_STEPS:-30}
EAGER=${MXABLATE_BENCH_EAGER:-0}  # 1: each of our runs again with train.cuda_graphs: off
source scripts/gpu-env.sh  # PY, the carried packages, configure, NCCL settings
[ -f "$DATA/manifest.json" ] || { echo "gpu-speed-bench: $DATA is not a prepared data directory" >&2; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "gpu-speed-bench: no GPU visible (nvidia-smi -L failed)" >&2; exit 2; }

source scripts/gpu-trainer-lib.sh
build_trainer "$BUILD_DIR" "$OUT/build" "$PY"
TRAIN=$(realpath "$BUILD_DIR/bin/mxablate-train")
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
VOCAB=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokenizer"]["vocab_size"])' "$DATA/manifest.json")
echo "{\"who\": \"data\", \"vocab\": $VOCAB}" >>"$RESULTS"

echo "== baselines"
$PY scripts/gpu_baselines.py | tee -a "$RESULTS"

# model seq tokens/step micro-batch tokens
SHAPES=("llama-20m 256 16384 16384" "llama-125m 512 65536 16384")
ARMS=(bf16 fp8 mxfp4 mxfp4+h16)
for shape in "${SHAPES[@]}"; do
  read -r model seq step micro <<<"$shape"
  [ -n "$ONLY" ] && [ "$ONLY" != "$model" ] && continue
  echo "== mxablate-train $model ($STEPS steps of $step tokens)"
  for arm in "${ARMS[@]}"; do
    name=ours-$model-$arm
    dir=$OUT/$name
    rm -rf "$dir" && mkdir -p "$dir"
    # Evaluation once, at the start (every_tokens past the end): the figure is the steps' pace.
    config "$name" cuda "$model" "$arm" "$seq" "$step" "$micro" "$STEPS" 1000000 "$((seq * 8))" 0 >"$dir/config.json"
    rc=0
    "$TRAIN" --run-dir "$dir" >"$dir/output.txt" 2>&1 || rc=$?
    echo "  $name: exit $rc ($(tail -1 "$dir/output.txt"))"
    summary "$dir"
    if [ "$EAGER" = 1 ]; then  # the same run with every step eager: what graphed steps gain
      edir=$OUT/$name-eager
      rm -rf "$edir" && mkdir -p "$edir"
      config "$name-eager" cuda "$model" "$arm" "$seq" "$step" "$micro" "$STEPS" 1000000 "$((seq * 8))" 0 \
        '{"train": {"cuda_graphs": "off"}}' >"$edir/config.json"
      "$TRAIN" --run-dir "$edir" >"$edir/output.txt" 2>&1 || echo "  $name-eager: failed ($(tail -1 "$edir/output.txt"))"
      summary "$edir"
    fi
    if [ "$PROFILE" = 1 ] && [ $rc = 0 ]; then
      pdir=$OUT/profile-$model-$arm
      rm -rf "$pdir" && mkdir -p "$pdir"
      config "profile-$model-$arm" cuda "$model" "$arm" "$seq" "$step" "$micro" 8 1000000 "$((seq * 8))" 0 >"$pdir/config.json"
      "$TRAIN" --run-dir "$pdir" --profile-steps 6:8 --profile-trace "$pdir/trace.json" >"$pdir/output.txt" 2>&1 &&
        { echo "  profile of $name, steps 6-8:"; $PY scripts/profile-summary.py "$pdir/trace.json" --steps 3 --top 15; } ||
        echo "  profile of $name failed: $(tail -1 "$pdir/output.txt")"
    fi
  done
  if [ "$PEER" = 1 ]; then
    echo "== compiled PyTorch peer $model"
    for arm in ${MXABLATE_BENCH_PEER_ARMS:-bf16 fp8 fdw fdw+h16}; do
      timeout 300 $PY scripts/peer_llama.py --model "$model" --arm "$arm" --vocab "$VOCAB" \
        2>"$OUT/peer-$model-$arm.err" | tee -a "$RESULTS" ||
        echo "  peer $model $arm failed: $(tail -3 "$OUT/peer-$model-$arm.err")"
    done
  fi
done

echo "== report"
$PY scripts/speed-report.py "$OUT"
