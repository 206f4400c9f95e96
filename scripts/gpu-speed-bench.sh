#!/usr/bin/env bash
# The speed benchmark of docs/design.md §9, for the GPU machine. It measures
#   - the baselines: BF16 cuBLAS at 8192³ and device copy bandwidth (gpu_baselines.py);
#   - with --gemm-shapes, the 21 GEMMs of one block (Fprop, Dgrad, Wgrad of q, k, v, o, gate,
#     up, down) at 16,384 tokens in BF16 and FP8 tensor-wise, at the llama-8b, llama-1.3b and
#     llama-125m shapes (gemm_shapes_bench.py; GEMM-only figures);
#   - our trainer, mxablate-train, on llama-20m (seq 256, 16,384 tokens/step), llama-125m
#     (seq 512, 65,536 tokens/step as 4 micro-batches) and llama-1.3b (seq 2048, 65,536
#     tokens/step as 4 micro-batches, activation checkpointing), in the arms of
#     scripts/bench_arms.py, named as the recipes name them: bf16, fp8, FDW, FDW+H16, and the
#     execution variants RECIPE_ARM@KEY=VALUE (fp8@quant.fp8_scaling=delayed,
#     FDW+H16@train.fused_producers=true, FDW+H16@quant.gemm_path=fp8,
#     FDW+H16@quant.gemm_path=fp8-where-exact). Each run's config is written by `mxablate plan
#     --json` (gpu-trainer-lib.sh's `config`). The rate is the median tokens/s of the train events
#     after step 3, peak GPU memory from run_end (scripts/run_figures.py); shapes and steps from
#     scripts/llama_shapes.py;
#   - the compiled PyTorch peer on the same shapes (peer_llama.py: once per distinct fake
#     quantization of the arms asked for; with activation checkpointing where ours has it);
# then prints the table and every target with the baseline it divides by (speed-report.py).
#
# One device call may last 600 s, so it runs in parts: each call appends its figures to the
# results file under a header line naming the GPU, and speed-report.py reads the files of several
# calls together where they were measured on the same GPU (it refuses otherwise).
#
# Usage: scripts/gpu-speed-bench.sh DATA_DIR [--only MODEL[,MODEL…]] [--arms LIST|none]
#          [--peer-arms LIST] [--no-peer] [--no-baselines] [--gemm-shapes] [--results FILE]
#          [--recompute true|auto|selective|selective+N|N] [--profile]
#   --only        the models (default: every model of llama_shapes.py's BENCH: llama-20m,
#                 llama-125m, llama-1.3b)
#   --arms        our arms, comma-separated (default: all of bench_arms.py); none: no trainer run
#                 (nor build)
#   --peer-arms   the arms whose peer figures are wanted (default: --arms); the peer runs once
#                 per distinct fake quantization among them
#   --no-peer     no peer runs
#   --no-baselines  skip gpu_baselines.py (a later call of a series: the report takes the first)
#   --gemm-shapes   also run gemm_shapes_bench.py (about 20 s)
#   --results     the results file to append to (default OUT/results.jsonl); point it under the
#                 device tool's $OUT to have it come back
#   --recompute   train.activation_checkpointing of our runs where llama_shapes.py checkpoints
#                 (default true: every block; auto: the memory plan's choice on this GPU;
#                 selective: every block's norm outputs and SwiGLU product made again, selective+N
#                 with N blocks whole besides; run_start says what each run recomputed; 0 or
#                 false: the peer recomputes nothing either, else it checkpoints every block)
#   --profile     also writes a Kineto trace of steps 5-8 of each of our runs and prints
#                 profile-summary.py's tables of steps 6-8 (step 5 carries the profiler's start),
#                 our kernels also by launch shape (the profiled run is separate from the timed one)
#   Env: MXABLATE_GPU_BUILD_DIR (default build-gpu, shared with gpu-check.sh), MXABLATE_BENCH_OUT
#        (default /tmp/mxablate-speed), MXABLATE_BENCH_STEPS (our steps for every model, instead
#        of llama_shapes.py's), MXABLATE_BENCH_EAGER=1 (each of our runs also with
#        train.cuda_graphs: off, as ours-MODEL-ARM-eager), MXABLATE_BENCH_RUN_LIMIT_S (default
#        180: a run still going then is stopped, so one hung arm cannot eat the call).
set -euo pipefail
cd "$(dirname "$0")/.."

USAGE="usage: gpu-speed-bench.sh DATA_DIR [--only MODEL[,MODEL…]] [--arms LIST|none] [--peer-arms LIST] [--no-peer] [--no-baselines] [--gemm-shapes] [--results FILE] [--recompute true|auto|selective|selective+N|N] [--profile]"
[ $# -ge 1 ] && [[ $1 != --* ]] || { echo "$USAGE" >&2; exit 2; }
CALL_ARGS="$*"  # recorded in the results file's header line
DATA=$1
shift
PEER=1 PROFILE=0 BASELINES=1 GEMM_SHAPES=0 ONLY="" ARMS_ARG="" PEER_ARMS_ARG="" RESULTS_ARG="" RECOMPUTE=true
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu-speed-bench: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case $1 in
    --no-peer) PEER=0 ;;
    --profile) PROFILE=1 ;;
    --no-baselines) BASELINES=0 ;;
    --gemm-shapes) GEMM_SHAPES=1 ;;
    --only) need_value "$@"; ONLY=$2; shift ;;
    --arms) need_value "$@"; ARMS_ARG=$2; shift ;;
    --peer-arms) need_value "$@"; PEER_ARMS_ARG=$2; shift ;;
    --results) need_value "$@"; RESULTS_ARG=$2; shift ;;
    --recompute)
      need_value "$@"
      [[ $2 =~ ^(true|auto|selective(\+all|\+[0-9]+)?|[0-9]+)$ ]] || { echo "gpu-speed-bench: --recompute: expected true, auto, selective, selective+N or a number of blocks, got '$2'" >&2; exit 2; }
      RECOMPUTE=$2; shift ;;
    *) echo "gpu-speed-bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
BUILD_DIR=${MXABLATE_GPU_BUILD_DIR:-build-gpu}
OUT=${MXABLATE_BENCH_OUT:-/tmp/mxablate-speed}
EAGER=${MXABLATE_BENCH_EAGER:-0}  # 1: each of our runs again with train.cuda_graphs: off
RUN_LIMIT=${MXABLATE_BENCH_RUN_LIMIT_S:-180}
source scripts/gpu-env.sh  # PY, the carried packages, configure, NCCL settings

# Everything a typo could break is checked before anything is built or run (one line, exit 2).
MODELS=$($PY scripts/llama_shapes.py bench ${ONLY:+"$ONLY"}) || exit 2
if [ "$ARMS_ARG" = none ]; then
  ARMS=()
else
  mapfile -t ARMS < <($PY scripts/bench_arms.py check "${ARMS_ARG:-$($PY scripts/bench_arms.py names | paste -sd,)}") &&
    [ ${#ARMS[@]} -gt 0 ] || exit 2
fi
PEER_RUNS=()
if [ "$PEER" = 1 ]; then
  peer_list=${PEER_ARMS_ARG:-$(IFS=,; echo "${ARMS[*]}")}
  if [ -n "$peer_list" ] && [ "$peer_list" != none ]; then
    mapfile -t PEER_RUNS < <($PY scripts/bench_arms.py peer-runs "$peer_list") && [ ${#PEER_RUNS[@]} -gt 0 ] || exit 2
  fi
fi
[ -f "$DATA/manifest.json" ] || { echo "gpu-speed-bench: $DATA is not a prepared data directory" >&2; exit 2; }
DATA=$(realpath "$DATA")
[ "$(gpu_count)" -ge 1 ] || { echo "gpu-speed-bench: no GPU visible" >&2; exit 2; }

source scripts/gpu-trainer-lib.sh
mkdir -p "$OUT"
RESULTS=${RESULTS_ARG:-$OUT/results.jsonl}
mkdir -p "$(dirname "$RESULTS")"
[ ${#ARMS[@]} -eq 0 ] || build_trainer "$BUILD_DIR" "$OUT/build"
VOCAB=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokenizer"]["vocab_size"])' "$DATA/manifest.json")

# The call's header: the lines after it (up to the next header) are this call's, measured on
# this GPU; speed-report.py compares figures of several calls only where the GPUs are the same.
$PY - "$VOCAB" "$CALL_ARGS" <<'PYEOF' >>"$RESULTS"
import datetime, json, socket, sys
import torch
print(json.dumps({"who": "call", "gpu": torch.cuda.get_device_name(), "host": socket.gethostname(),
                  "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "torch": torch.__version__, "vocab": int(sys.argv[1]), "args": sys.argv[2]}))
PYEOF
echo "{\"who\": \"data\", \"vocab\": $VOCAB}" >>"$RESULTS"
echo "== results appended to $RESULTS"

if [ "$BASELINES" = 1 ]; then
  echo "== baselines"
  $PY scripts/gpu_baselines.py | tee -a "$RESULTS" || echo "  gpu_baselines failed"
fi
if [ "$GEMM_SHAPES" = 1 ]; then
  echo "== GEMM shapes of one block at 16,384 tokens, BF16 and FP8 tensor-wise (GEMM-only)"
  $PY scripts/gemm_shapes_bench.py | tee -a "$RESULTS" || echo "  gemm_shapes_bench failed"
fi

# our_run NAME MODEL ARM SEQ STEP MICRO STEPS EXTRA [TRAINER-ARGS…]: one trainer run in $OUT/NAME;
# prints its exit code (config's where the config was refused: its line is the run's output).
# Evaluation once, at the start (every_tokens past the end): the figure is the steps' pace.
our_run() {
  local name=$1 model=$2 arm=$3 seq=$4 step=$5 micro=$6 steps=$7 extra=$8 rc=0
  local dir=$OUT/$name
  rm -rf "$dir" && mkdir -p "$dir"
  config cuda "$model" "$arm" "$seq" "$step" "$micro" "$steps" 1000000 "$((seq * 8))" 0 "$extra" \
    >"$dir/config.json" 2>"$dir/output.txt" || rc=$?
  [ "$rc" != 0 ] ||
    timeout --kill-after=30 "$RUN_LIMIT" "$TRAIN" --run-dir "$dir" "${@:9}" >"$dir/output.txt" 2>&1 || rc=$?
  echo "$rc"
}

# (fd 3: nothing a run starts can read the list from stdin)
while read -r -u 3 model seq step micro steps ckpt peer_warmup peer_steps; do
  steps=${MXABLATE_BENCH_STEPS:-$steps}
  # llama_shapes.py says which models checkpoint activations (the peer reads the same flag).
  extra='{}'
  value=$RECOMPUTE
  [[ $value =~ ^(auto|selective) ]] && value="\"$value\""
  [ "$ckpt" = 1 ] && extra="{\"train\": {\"activation_checkpointing\": $value}}"
  if [ ${#ARMS[@]} -gt 0 ]; then
    echo "== mxablate-train $model ($steps steps of $step tokens, micro-batches of $micro, seq $seq$([ "$ckpt" = 1 ] && echo ", activation_checkpointing: $RECOMPUTE"))"
  fi
  for arm in "${ARMS[@]}"; do
    name=ours-$model-$arm
    t0=$SECONDS
    rc=$(our_run "$name" "$model" "$arm" "$seq" "$step" "$micro" "$steps" "$extra")
    echo "  $name: exit $rc in $((SECONDS - t0)) s ($(tail -1 "$OUT/$name/output.txt"))"
    summary "$OUT/$name" || true
    # What the run recomputed (run_start's recompute: `auto` resolved on this GPU).
    echo "    recompute: $($PY scripts/run_figures.py recompute "$OUT/$name")"
    $PY scripts/speed-report.py --ours-line "$OUT/$name" "$model" "$arm" "$rc" >>"$RESULTS" ||
      echo "  speed-report.py --ours-line failed for $name"
    if [ "$EAGER" = 1 ]; then  # the same run with every step eager: what graphed steps gain
      eextra=$($PY -c 'import json,sys; e=json.loads(sys.argv[1]); e.setdefault("train", {})["cuda_graphs"]="off"; print(json.dumps(e))' "$extra")
      rc=$(our_run "$name-eager" "$model" "$arm" "$seq" "$step" "$micro" "$steps" "$eextra")
      [ "$rc" = 0 ] || echo "  $name-eager: exit $rc ($(tail -1 "$OUT/$name-eager/output.txt"))"
      summary "$OUT/$name-eager" || true
    fi
    if [ "$PROFILE" = 1 ] && [ "$rc" = 0 ]; then
      pdir=$OUT/profile-$model-$arm
      prc=$(our_run "profile-$model-$arm" "$model" "$arm" "$seq" "$step" "$micro" 8 "$extra" \
        --profile-steps 5:8 --profile-trace "$pdir/trace.json")
      if [ "$prc" = 0 ]; then
        echo "  profile of $name, steps 6-8:"
        $PY scripts/profile-summary.py "$pdir/trace.json" --skip-steps 1 --steps 3 --top 15 --by-launch 'mxablate::' ||
          echo "  profile-summary failed"
      else
        echo "  profile of $name failed: $(tail -1 "$pdir/output.txt")"
      fi
    fi
  done
  if [ ${#PEER_RUNS[@]} -gt 0 ]; then
    # The peer recomputes what ours does where that is all or nothing: blocks checkpointed, or
    # (--recompute 0 or false) none.
    peer_ckpt=() peer_note=""
    if [ "$ckpt" = 1 ]; then
      peer_note=", activation checkpointing per block"
      [[ $RECOMPUTE =~ ^(0|false)$ ]] && { peer_ckpt=(--no-checkpoint); peer_note=", no recompute"; }
    fi
    echo "== compiled PyTorch peer $model ($peer_warmup untimed + $peer_steps timed steps$peer_note)"
    for arm in "${PEER_RUNS[@]}"; do
      t0=$SECONDS
      if timeout --kill-after=30 300 $PY scripts/peer_llama.py --model "$model" --arm "$arm" --vocab "$VOCAB" \
           "${peer_ckpt[@]}" 2>"$OUT/peer-$model-$arm.err" | tee -a "$RESULTS"; then
        echo "  peer $model $arm: $((SECONDS - t0)) s"
      else
        echo "  peer $model $arm failed after $((SECONDS - t0)) s: $(tail -3 "$OUT/peer-$model-$arm.err")"
      fi
    done
  fi
done 3<<<"$MODELS"

echo "== report"
$PY scripts/speed-report.py "$RESULTS"
