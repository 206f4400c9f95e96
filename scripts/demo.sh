#!/usr/bin/env bash
# The README's main job until the CPU ablation sweep lands: quantize an activation-like tensor
# (Gaussian with a few outlier channels, as LLM activations are) and a gradient-like tensor
# (heavy-tailed) with the arms' settings, and print what each setting does to them.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MXABLATE_BUILD_DIR:-build}/bin/mxablate
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

/usr/bin/python3 - "$WORK" <<'PY'
import sys, numpy as np
work = sys.argv[1]
rng = np.random.default_rng(0)
act = rng.standard_normal((1024, 1024)).astype(np.float32)
act[:, rng.choice(1024, 8, replace=False)] *= 50          # outlier channels
grad = (rng.standard_t(3, (1024, 1024)) * 1e-3).astype(np.float32)  # heavy tails
np.save(f"{work}/activation.npy", act)
np.save(f"{work}/gradient.npy", grad)
PY

printf '%-10s %-8s %-4s %-6s %-10s %-15s %12s %10s %10s %12s\n' \
  tensor format axis rule rounding hadamard rel_error saturated flushed mean_error
for tensor in activation gradient; do
  while read -r format axis rule rounding hadamard; do
    "$BIN" quant --in "$WORK/$tensor.npy" --out "$WORK/q.npy" --format "$format" --axis "$axis" \
      --scale-rule "$rule" --rounding "$rounding" --hadamard "$hadamard" --seed 1 --json |
      /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%-10s %-8s %-4s %-6s %-10s %-15s %12.5f %9.3f%% %9.3f%% %12.3e" % (
    sys.argv[1], r["format"], r["axis"], r["scale_rule"], r["rounding"], r["hadamard"],
    r["relative_error"], 100 * r["fraction_saturated"], 100 * r["fraction_flushed"],
    r["mean_error"]))' "$tensor"
  done <<'ARMS'
fp8-e4m3 rows floor nearest none
mxfp4 rows floor nearest none
mxfp4 cols floor nearest none
mxfp4 rows ceil nearest none
mxfp4 rows even nearest none
mxfp4 cols floor stochastic none
mxfp4 cols floor nearest deterministic
mxfp4 cols floor nearest per-step-random
nvfp4 cols floor nearest none
ARMS
done
