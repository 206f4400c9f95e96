#!/usr/bin/env bash
# Trainer checks for the GPU machine (the lead runs this there; nothing here runs in CPU CI).
#
#   1. Uses build-gpu/bin/mxablate-train and mxablate (the config writer) from scripts/gpu-check.sh,
#      or builds just those targets the same way (gpu-env.sh: CUDA kernels on, carried packages).
#   2. CPU vs CUDA: llama-20m from the same initial weights on the same batches, in BF16 and in
#      full MXFP4 (Fprop, Dgrad, Wgrad); the train losses of steps 1-3 must agree within
#        step 1 (before any update):  |dloss| <= 0.005 (BF16), 0.01 (MXFP4)
#        steps 2-3:                   |dloss| <= 0.02  (BF16), 0.03 (MXFP4)
#      Why not bit-exact: on CUDA the GEMM outputs are BF16 (cuBLAS) and attention is the fused
#      kernel; on the CPU outputs stay FP32 and attention is spelled out. The quantizers are
#      bit-exact between devices, but their inputs already differ by those roundings.
#   3. Throughput: tokens/s of llama-20m and llama-125m in the arms bf16, FDW (full MXFP4) and
#      FDW+H16 (and the deterministic H16 rotation on Wgrad): the median of the sampled train
#      events, and run_end's figure including evaluation.
#   4. Convergence: llama-20m for STEPS steps (default 200, ~1.8 epochs of the default corpus)
#      in BF16 and full MXFP4: validation loss must fall by > 2 nats, no fatal divergence.
#   5. Only with MXABLATE_CHECK_LARGE=1: llama-1.3b at seq_len 2048 with activation
#      checkpointing (train.activation_checkpointing), BF16 and full MXFP4, 10 steps of 16384
#      tokens: tokens/s and peak GPU memory.
#
# Usage: scripts/gpu-train-check.sh [DATA_DIR]
#   DATA_DIR: a prepared data directory (default data/default: carry it to the GPU machine).
#   Env: MXABLATE_GPU_BUILD_DIR (default build-gpu, as gpu-check.sh), MXABLATE_CHECK_STEPS (200),
#        MXABLATE_CHECK_OUT (run directories; default /tmp/mxablate-gpu-train-check),
#        MXABLATE_CHECK_LARGE (1: also step 5).
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=$(realpath "${1:-data/default}")
BUILD_DIR=${MXABLATE_GPU_BUILD_DIR:-build-gpu}
STEPS=${MXABLATE_CHECK_STEPS:-200}
OUT=${MXABLATE_CHECK_OUT:-/tmp/mxablate-gpu-train-check}
source scripts/gpu-env.sh  # PY, the carried packages, configure, NCCL settings

[ -f "$DATA/manifest.json" ] || { echo "gpu-train-check: $DATA is not a prepared data directory" >&2; exit 2; }
[ "$(gpu_count)" -ge 1 ] || { echo "gpu-train-check: no GPU visible" >&2; exit 2; }

# Reuse scripts/gpu-check.sh's build (same directory) when it exists; otherwise configure the
# same way and build only what the runs need.
source scripts/gpu-trainer-lib.sh
build_trainer "$BUILD_DIR" "$OUT"
mkdir -p "$OUT"

failures=0
echo "== 2. CPU vs CUDA, first steps (llama-20m, 4096 tokens per step)"
for prec in bf16 FDW; do
  run "first-cpu-$prec" cpu llama-20m $prec 256 4096 4096 3 1000 2048 "$(nproc)" || failures=$((failures + 1))
  run "first-cuda-$prec" cuda llama-20m $prec 256 4096 4096 3 1000 2048 0 || failures=$((failures + 1))
  $PY - "$OUT/first-cpu-$prec" "$OUT/first-cuda-$prec" "$prec" <<'PYEOF' || failures=$((failures + 1))
import sys
sys.path.insert(0, "scripts")
from run_figures import load, train_losses
cpu, cuda, prec = sys.argv[1:]
a, b = train_losses(load(cpu)), train_losses(load(cuda))
tol1, tol = (0.005, 0.02) if prec == "bf16" else (0.01, 0.03)
ok = True
for s in (1, 2, 3):
    d = abs(a[s] - b[s]); lim = tol1 if s == 1 else tol
    ok &= d <= lim
    print(f"    {prec} step {s}: cpu {a[s]:.5f} cuda {b[s]:.5f} |d| {d:.5f} (limit {lim}) {'ok' if d <= lim else 'FAIL'}")
sys.exit(0 if ok else 1)
PYEOF
done

echo "== 3. Throughput (tokens/s; median of sampled train events | run_end incl. evaluation)"
for model in llama-20m llama-125m; do
  for prec in bf16 FDW FDW+H16; do
    run "speed-$model-$prec" cuda $model $prec 512 65536 16384 30 1000 16384 0 || failures=$((failures + 1))
    summary "$OUT/speed-$model-$prec"
  done
done

echo "== 4. Convergence (llama-20m, $STEPS steps of 32768 tokens)"
for prec in bf16 FDW; do
  run "converge-$prec" cuda llama-20m $prec 512 32768 32768 "$STEPS" 50 65536 0 || failures=$((failures + 1))
  $PY - "$OUT/converge-$prec" <<'PYEOF' || failures=$((failures + 1))
import sys
sys.path.insert(0, "scripts")
from run_figures import divergences, load, run_end, val_losses
ev = load(sys.argv[1])
evals, end = val_losses(ev), run_end(ev)
print("    " + sys.argv[1].rsplit('/', 1)[1] + ": " + ", ".join(f"{s}:{v:.3f}" for s, v in evals) +
      f" | divergence events {divergences(ev)} | {end['status']} | {end['tokens_per_s']:,.0f} tokens/s")
ok = end["status"] == "budget_exhausted" and evals[-1][1] < evals[0][1] - 2.0
sys.exit(0 if ok else 1)
PYEOF
done

if [ "${MXABLATE_CHECK_LARGE:-0}" = 1 ]; then
  echo "== 5. llama-1.3b, seq_len 2048, activation checkpointing (tokens/s | run_end | peak GPU)"
  for prec in bf16 FDW; do
    run "large-llama-1.3b-$prec-ckpt" cuda llama-1.3b $prec 2048 16384 16384 10 1000 4096 0 \
      '{"train": {"activation_checkpointing": true}}' || failures=$((failures + 1))
    summary "$OUT/large-llama-1.3b-$prec-ckpt"
  done
fi

echo "gpu-train-check: $failures failure(s); run directories in $OUT"
[ "$failures" -eq 0 ]
