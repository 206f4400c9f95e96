#!/usr/bin/env bash
# Sharded data parallelism on the GPU machine (nothing here runs in CPU CI). Needs 4 GPUs (the device tool's nvidia-h100-x4).
#
#   1. llama-125m, seq 512, 65,536 tokens a step in 4 micro-batches, arm FDW+H16, 4 ranks:
#      replicated, shard optimizer, shard gradients. Step 1 equal (the same weights and keys);
#      steps 2-8 within 5e-5 relative of the replicated run (the gradient and the global norm are
#      summed in another order, and BF16 GEMM outputs carry such differences on; the same bound
#      gpu-scale-check.sh holds two ranks to against one). Peak GPU memory per rank.
#   2. llama-1.3b, seq 2048, 65,536 tokens a step as 8 micro-batches of 4 sequences, activation
#      checkpointing, BF16: 1 GPU against 4 ranks with shard gradients (target >= 3.6x).
#   3. llama-8b (d 4096, 32 layers, 32/8 heads, FFN 14,336) at the Llama 3 vocabulary (128,256)
#      and seq 8192, activation checkpointing, BF16, 4 ranks with shard gradients, 2 micro-batches
#      of one sequence per rank: tokens/s per GPU, MFU, peak memory per rank against `mxablate
#      plan`'s prediction (target >= 5,800 tokens/s per GPU on H100); the plan's verdict on 80 GB
#      and 141 GB GPUs.
#   5. llama-8b as part 3 on up to 4 ranks (2 × H200 hold it too) in the arms bf16, fp8 (the
#      paper's baseline: F+D+W in FP8, per-tensor current scaling) and FDW+H16, 2 micro-batches
#      per rank, 8 steps (the median of steps 3-8): tokens/s per GPU and each arm's step against
#      BF16's in the same run (the rates the README's cost of the paper's experiment uses).
#   4. (one GPU of 80 GB) llama-8b unsharded on one rank: the trainer must end with its one-line
#      out-of-memory reason and exit 5 (what it tried to allocate, the prediction, the setting).
#   6. (one GPU) llama-8b unsharded, one rank's work (16,384 tokens a step as 2 micro-batches),
#      BF16: every block recomputed against train.activation_checkpointing: auto (the memory
#      plan's choice on this GPU): tokens/s, MFU, the blocks auto recomputed, peak memory against
#      the plan's prediction for each.
#   7. (one GPU) llama-1.3b, seq 2048, 65,536 tokens a step as 4 micro-batches, BF16 and
#      FDW+H16, with 0, 8, 16 and 24 of its 24 blocks recomputed, and with selective recompute
#      alone and with 12 blocks whole besides (MXABLATE_P7_SETTINGS: other settings), 4 steps
#      each: the measured peak (run_end: what the caching allocator handed out) against the plan's
#      prediction with and without its fragmentation allowance, the weight cache the trainer kept
#      beside it, and a rough rate (the median of steps 3-4). The change per recomputed block says
#      which of the plan's per-block terms are off.
# The data are uniform random tokens (scripts/synthetic-megatron.py): speed, memory and the
# agreement of sharded and replicated runs only; nothing is learnt from them.
#      Then the same run unsharded: it must end with the one-line out-of-memory reason on 80 GB.
#
# Usage: scripts/gpu-shard-check.sh [--parts "1 2 3 4 5 6 7"]   (carry: [".carry"]; parts 1-3 need 4 GPUs, 5 two)
#   Env: MXABLATE_GPU_BUILD_DIR (build-gpu), MXABLATE_CHECK_OUT (/tmp/mxablate-gpu-shard-check).
set -euo pipefail
cd "$(dirname "$0")/.."

PARTS="1 2 3 4 5"
[ "${1:-}" = "--parts" ] && PARTS=$2
BUILD_DIR=${MXABLATE_GPU_BUILD_DIR:-build-gpu}
OUT=${MXABLATE_CHECK_OUT:-/tmp/mxablate-gpu-shard-check}
source scripts/gpu-env.sh  # PY, the carried packages, configure, NCCL settings
GPUS=$(gpu_count)
[ "$GPUS" -ge 1 ] || { echo "gpu-shard-check: no GPU visible" >&2; exit 2; }
if { [ "$GPUS" -lt 4 ] && [[ "$PARTS" =~ [123] ]]; } || { [ "$GPUS" -lt 2 ] && [[ "$PARTS" =~ 5 ]]; }; then
  echo "gpu-shard-check: parts 1-3 need 4 GPUs and part 5 two, $GPUS visible" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1

source scripts/gpu-trainer-lib.sh
mkdir -p "$OUT"
build_trainer "$BUILD_DIR" "$OUT/trainer"  # TRAIN, and MXABLATE for the data and the plans
failures=0

# Data: uniform random tokens (speed, memory and sharded-against-replicated agreement need no
# language): at a 32,000 vocabulary for parts 1-2, at the Llama 3 vocabulary for part 3.
synthetic() {  # synthetic NAME VOCAB DOCUMENTS TOKENS
  local dir=$OUT/$1
  if [ ! -f "$dir/manifest.json" ]; then
    $PY scripts/synthetic-megatron.py "$OUT/$1-raw" --vocab "$2" --documents "$3" --tokens "$4" >/dev/null
    "$MXABLATE" data import --megatron "$OUT/$1-raw" --vocab-size "$2" --out "$dir" --force \
      --val-fraction 0.05 >"$OUT/$1.import.log" 2>&1 || { cat "$OUT/$1.import.log"; exit 1; }
  fi
  realpath "$dir"
}
DATA=$(synthetic random32k 32000 1200 2049)
[[ "$PARTS" =~ [3456] ]] && SYNTH=$(synthetic random128k 128256 600 8193)

# rank_peaks DIR: every rank's peak GPU memory as its line in output.txt says it.
rank_peaks() { grep -h "peak GPU memory" "$1/output.txt" | sed 's/^/    /' || true; }

if [[ " $PARTS " == *" 1 "* ]]; then
  echo "== 1. llama-125m, 4 ranks, 4 micro-batches, FDW+H16: replicated / shard optimizer / shard gradients"
  for shard in none optimizer gradients; do
    run "p1-$shard" cuda llama-125m FDW+H16 512 65536 16384 8 1000 16384 0 \
      "{\"parallel\": {\"data\": 4, \"shard\": \"$shard\"}}" || failures=$((failures + 1))
    summary "$OUT/p1-$shard"
    rank_peaks "$OUT/p1-$shard"
  done
  $PY - "$OUT/p1-none" "$OUT/p1-optimizer" "$OUT/p1-gradients" <<'PYEOF' || failures=$((failures + 1))
import sys
sys.path.insert(0, "scripts")
from run_figures import load, train_losses
ref = train_losses(load(sys.argv[1]))
ok = len(ref) == 8
for d in sys.argv[2:]:
    got = train_losses(load(d))
    for s in sorted(ref):
        rel = abs(got[s] - ref[s]) / abs(ref[s])
        limit = 0.0 if s == 1 else 5e-5
        ok &= rel <= limit
        print(f"    {d.rsplit('/', 1)[1]} step {s}: {got[s]:.7f} vs replicated {ref[s]:.7f} ({rel:.1e}, limit {limit:g})")
sys.exit(0 if ok else 1)
PYEOF
fi

if [[ " $PARTS " == *" 2 "* ]]; then
  echo "== 2. llama-1.3b, seq 2048, activation checkpointing, BF16: 1 GPU against 4 ranks (shard gradients)"
  CUDA_VISIBLE_DEVICES=0 run p2-one cuda llama-1.3b bf16 2048 65536 8192 10 1000 16384 0 \
    '{"train": {"activation_checkpointing": true}}' || failures=$((failures + 1))
  summary "$OUT/p2-one"
  for shard in none optimizer gradients; do
    run "p2-four-$shard" cuda llama-1.3b bf16 2048 65536 8192 10 1000 16384 0 \
      "{\"train\": {\"activation_checkpointing\": true}, \"parallel\": {\"data\": 4, \"shard\": \"$shard\"}}" ||
      failures=$((failures + 1))
    summary "$OUT/p2-four-$shard"
    rank_peaks "$OUT/p2-four-$shard"
    $PY - "$OUT/p2-one" "$OUT/p2-four-$shard" <<'PYEOF' || failures=$((failures + 1))
import sys
sys.path.insert(0, "scripts")
from run_figures import load, median_tokens_per_s
ratio = median_tokens_per_s(load(sys.argv[2])) / median_tokens_per_s(load(sys.argv[1]))
print(f"    4 ranks / 1 GPU: {ratio:.2f}x (target >= 3.6)")
sys.exit(0 if ratio >= 3.6 else 1)
PYEOF
  done
fi

if [[ " $PARTS " == *" 3 "* ]]; then
  echo "== 3. llama-8b (vocabulary 128,256), seq 8192, activation checkpointing, BF16, 4 ranks"
  DATA=$SYNTH
  # The plan's prediction for the runs below, and its verdict on 80 GB and 141 GB GPUs.
  for shard in gradients none; do
    cat >"$OUT/p3-$shard.yaml" <<YAML
name: p3-$shard
base:
  model: llama-8b
  device: cuda
  data: {dataset: $SYNTH, seq_len: 8192}
  train: {global_batch_tokens: 65536, micro_batch_tokens: 8192, max_tokens: 393216, lr: 3.0e-4,
          warmup_tokens: 65536, activation_checkpointing: true}
  eval: {every_tokens: 1.0e9, tokens: 8192}
  precision: {fprop: bf16, dgrad: bf16, wgrad: bf16}
  parallel: {data: 4, shard: $shard}
  checkpoint: {every_steps: 0}
arms:
  bf16: {}
YAML
    echo "  plan, shard $shard:"
    "$MXABLATE" plan "$OUT/p3-$shard.yaml" --memory 2>&1 | tail -4 | sed 's/^/    /'
    for gpu in 80GB 141GB; do
      if "$MXABLATE" plan "$OUT/p3-$shard.yaml" --gpu-memory $gpu >"$OUT/p3-$shard-$gpu.txt" 2>&1; then
        echo "    --gpu-memory $gpu: accepted"
      else
        echo "    --gpu-memory $gpu: refused: $(tail -1 "$OUT/p3-$shard-$gpu.txt" | cut -c1-240)"
      fi
    done
  done
  extra='{"train": {"activation_checkpointing": true}, "parallel": {"data": 4, "shard": "gradients"}}'
  run p3-gradients cuda llama-8b bf16 8192 65536 8192 6 1000 8192 0 "$extra" || failures=$((failures + 1))
  summary "$OUT/p3-gradients"
  rank_peaks "$OUT/p3-gradients"
  $PY - "$OUT/p3-gradients" <<'PYEOF' || failures=$((failures + 1))
import sys
sys.path.insert(0, "scripts")
from llama_shapes import flops_per_token
from run_figures import load, median_tokens_per_s
tps = median_tokens_per_s(load(sys.argv[1]), warm_steps=2) / 4
shape = dict(d=4096, layers=32, heads=32, kv_heads=8, ffn=14336, seq=8192)
# MFU against the H100 SXM's dense BF16 peak, 989 TFLOP/s (the H200 has the same tensor cores).
mfu = tps * flops_per_token(shape, 128256) / 989e12
print(f"    {tps:,.0f} tokens/s per GPU, MFU {100 * mfu:.1f} % (target >= 5,800 tokens/s per GPU)")
sys.exit(0 if tps >= 5800 else 1)
PYEOF
fi

if [[ " $PARTS " == *" 5 "* ]]; then
  RANKS=$(( GPUS < 4 ? GPUS : 4 ))
  echo "== 5. llama-8b, seq 8192, $RANKS ranks, shard gradients: bf16, the fp8 baseline, FDW+H16"
  DATA=$SYNTH
  for prec in bf16 fp8 FDW+H16; do
    run "p5-$prec" cuda llama-8b $prec 8192 $((RANKS * 16384)) 8192 8 1000 8192 0 \
      "{\"train\": {\"activation_checkpointing\": true}, \"parallel\": {\"data\": $RANKS, \"shard\": \"gradients\"}}" ||
      failures=$((failures + 1))
    summary "$OUT/p5-$prec"
    rank_peaks "$OUT/p5-$prec" | head -1
  done
  $PY - "$OUT" "$RANKS" <<'PYEOF'
import sys
sys.path.insert(0, "scripts")
from run_figures import load, median_tokens_per_s
def tps(name):
    return median_tokens_per_s(load(f"{sys.argv[1]}/{name}"), warm_steps=2) / int(sys.argv[2])
base = tps("p5-bf16")
for name in ("p5-bf16", "p5-fp8", "p5-FDW+H16"):
    r = tps(name)
    print(f"    {name[3:]}: {r:,.0f} tokens/s per GPU, step {base / r:.2f}x the BF16 step")
PYEOF
fi

if [[ " $PARTS " == *" 4 "* ]]; then
  echo "== 4. llama-8b unsharded on one GPU: the one-line out-of-memory reason, exit 5"
  if [ "$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)" -ge 100000 ]; then
    echo "    skipped: this GPU holds more than 100 GB"
  else
    DATA=$SYNTH
    rc=0
    CUDA_VISIBLE_DEVICES=0 run p4-one-rank cuda llama-8b bf16 8192 16384 8192 3 1000 8192 0 \
      '{"train": {"activation_checkpointing": true}}' || rc=$?
    echo "    exit $rc (expected 5); the trainer's last lines:"
    tail -3 "$OUT/p4-one-rank/output.txt" | cut -c1-400 | sed 's/^/      /'
    [ "$rc" -eq 5 ] || failures=$((failures + 1))
  fi
fi

if [[ " $PARTS " == *" 6 "* ]]; then
  echo "== 6. llama-8b unsharded, one rank's work, BF16: every block recomputed against auto"
  DATA=$SYNTH
  for setting in true auto; do
    value=$setting
    [ "$setting" = auto ] && value='"auto"'
    CUDA_VISIBLE_DEVICES=0 run "p6-$setting" cuda llama-8b bf16 8192 16384 8192 8 1000 8192 0 \
      "{\"train\": {\"activation_checkpointing\": $value}}" || failures=$((failures + 1))
    summary "$OUT/p6-$setting"
  done
  $PY - "$OUT" <<'PYEOF' || failures=$((failures + 1))
import sys
sys.path.insert(0, "scripts")
from llama_shapes import flops_per_token
from run_figures import load, median_tokens_per_s, recompute_reason, run_end
shape = dict(d=4096, layers=32, heads=32, kv_heads=8, ffn=14336, seq=8192)
rates = {}
for setting in ("true", "auto"):
    ev = load(f"{sys.argv[1]}/p6-{setting}")
    end = run_end(ev)
    rates[setting] = median_tokens_per_s(ev, warm_steps=2)
    # MFU against the dense BF16 peak, 989 TFLOP/s; the recomputed forwards are not counted.
    mfu = rates[setting] * flops_per_token(shape, 128256) / 989e12
    print(f"    {setting}: {rates[setting]:,.0f} tokens/s, MFU {100 * mfu:.1f} %, peak "
          f"{end['peak_gpu_bytes'] / 2**30:.1f} GiB; {recompute_reason(ev)}")
print(f"    auto / every block: {rates['auto'] / rates['true']:.3f}x tokens/s (target >= 1.15x)")
PYEOF
fi

if [[ " $PARTS " == *" 7 "* ]]; then
  echo "== 7. llama-1.3b on one GPU: peak memory by the recompute setting, against the plan"
  # MXABLATE_P7_SETTINGS: the train.activation_checkpointing values, as JSON (default below).
  P7_SETTINGS=${MXABLATE_P7_SETTINGS:-false 8 16 true \"selective\" \"selective+12\"}
  for arm in bf16 FDW+H16; do
    for k in $P7_SETTINGS; do
      CUDA_VISIBLE_DEVICES=0 run "p7-$arm-${k//\"/}" cuda llama-1.3b "$arm" 2048 65536 16384 4 1000 8192 0 \
        "{\"train\": {\"activation_checkpointing\": $k}}" || failures=$((failures + 1))
    done
  done
  $PY - "$OUT" "$MXABLATE" "$DATA" $P7_SETTINGS <<'PYEOF' || failures=$((failures + 1))
import json, subprocess, sys, tempfile, os
sys.path.insert(0, "scripts")
import bench_arms
from run_figures import load, median_tokens_per_s, run_end, run_start
out, mxablate, data = sys.argv[1:4]
settings = sys.argv[4:]
GiB = 2**30
# run_end's peak is what the caching allocator handed out: it is compared with the plan's
# allocator peak, with the weight cache in place of the weight operands where the run kept it.
print("    arm      recomputed    measured  predicted  ratio  tokens/s (2 of 4 steps)  (plan total, what must fit)")
worst = 0.0
for arm in ("bf16", "FDW+H16"):
    for k in settings:
        keys = bench_arms.run_keys(data, "cuda", "llama-1.3b", 2048, 65536, 16384, 4, 1000, 8192, 0)
        recipe = bench_arms.recipe(arm, keys, {"train": {"activation_checkpointing": json.loads(k)}})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.yaml")
            with open(path, "w") as f:
                json.dump(recipe, f)
            plan = json.loads(subprocess.run([mxablate, "plan", path, "--json"], check=True,
                                             capture_output=True, text=True).stdout)[0]
        m = plan["gpu_memory_per_rank"]
        ev = load(f"{out}/p7-{arm}-{k.strip(chr(34))}")
        start, end = run_start(ev), run_end(ev)
        kept = bool(start and start.get("weight_cache", {}).get("on"))
        predicted = m["allocator_peak"] + ((plan["weight_cache"]["bytes"] - m["weight_operands"]) if kept else 0)
        peak = end["peak_gpu_bytes"]
        worst = max(worst, abs(predicted / peak - 1))
        print(f"    {arm:8} {k.strip(chr(34)):>12}  {peak / GiB:8.2f}  {predicted / GiB:9.2f}  {predicted / peak:5.3f}"
              f"  {median_tokens_per_s(ev, warm_steps=2):>10,.0f}"
              f"  ({m['total'] / GiB:.2f}{', weight cache kept' if kept else ''})")
print(f"    largest difference {100 * worst:.1f} % (target <= 3 %)")
sys.exit(0 if worst <= 0.03 else 1)
PYEOF
fi

echo "gpu-shard-check: $failures failure(s); run directories in $OUT"
[ "$failures" -eq 0 ]
