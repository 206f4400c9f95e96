#!/usr/bin/env python3
"""GEMM-level speed of one transformer block's linear layers, BF16 against FP8 tensor-wise
(issue 20; the FP8 target at the 8B shape is read from this, scripts/speed-report.py).

For each model (default llama-8b, llama-1.3b, llama-125m; shapes from llama_shapes.py) and each
of its block's 7 linears y = x Wᵀ (W of N × K), at M tokens (default 16,384), the three GEMMs of
a training step:
  Fprop  Y  = X · Wᵀ     (M × N, reduce over K)
  Dgrad  dX = dY · W     (M × K, reduce over N)
  Wgrad  dW = dYᵀ · X    (N × K, reduce over M)
in BF16 (torch.mm on the operands and their transposed views, as cuBLAS takes them) and in FP8
with per-tensor scales (torch._scaled_mm, E4M3 × E4M3 forward, E5M2 dY × E4M3 backward,
use_fast_accum=False, BF16 output in both). _scaled_mm wants its first operand row-major and its
second column-major, so the FP8 codes are laid out as the trainer's quantizer writes them (X and
dY also down columns, W also transposed); that layout work and the quantization are not timed:
these are GEMM-only figures. Operands are random normal, scaled per tensor as current scaling
does (decode scale amax / 448 for E4M3, amax / 57344 for E5M2).

Each GEMM: CUDA events around `--inner` back-to-back calls, after `--warmup` untimed repeats; the
median of `--reps` repeats, divided by the inner count. Prints one JSON line per model:
{"who": "gemm_shapes", "model", "M", "gemms": [{"layer", "gemm", "m", "n", "k", "bf16_ms",
"fp8_ms"}, …], "bf16_ms", "fp8_ms" (the 21 GEMMs summed), "fp8_over_bf16", "device", "torch"}.
"""
import argparse
import json
import sys

import torch

from llama_shapes import ARCH, linears

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def timed_ms(fn, warmup, reps, inner):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return sorted(times)[len(times) // 2]


def fp8(x, dtype):
    """Per-tensor current scaling: codes of x / s and the decode scale s = amax / max_finite."""
    s = (x.float().abs().amax() / torch.finfo(dtype).max).clamp(min=1e-30)
    return (x.float() / s).to(dtype), s.reshape(()).float()


def bench_model(model, m, warmup, reps, inner):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for layer, n, k in linears(ARCH[model]):
        x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        w = (0.02 * torch.randn(n, k, device="cuda", generator=gen)).to(torch.bfloat16)
        dy = (1e-3 * torch.randn(m, n, device="cuda", generator=gen)).to(torch.bfloat16)
        x8, sx = fp8(x, E4M3)
        w8, sw = fp8(w, E4M3)
        g8, sg = fp8(dy, E5M2)
        # Column-major second operands and row-major first ones, in the layouts the quantizer
        # writes: X down columns (Wgrad), W transposed (Dgrad), dY transposed (Wgrad).
        xt8, wt8, gt8 = x8.t().contiguous(), w8.t().contiguous(), g8.t().contiguous()

        def smm(a, b, sa, sb):
            return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False)

        cases = {
            "fprop": (m, n, k, lambda: torch.mm(x, w.t()), lambda: smm(x8, w8.t(), sx, sw)),
            "dgrad": (m, k, n, lambda: torch.mm(dy, w), lambda: smm(g8, wt8.t(), sg, sw)),
            "wgrad": (n, k, m, lambda: torch.mm(dy.t(), x), lambda: smm(gt8, xt8.t(), sg, sx)),
        }
        for gemm, (gm, gn, gk, bf16_fn, fp8_fn) in cases.items():
            rows.append({"layer": layer, "gemm": gemm, "m": gm, "n": gn, "k": gk,
                         "bf16_ms": timed_ms(bf16_fn, warmup, reps, inner),
                         "fp8_ms": timed_ms(fp8_fn, warmup, reps, inner)})
        del x, w, dy, x8, w8, g8, xt8, wt8, gt8
    bf16_ms = sum(r["bf16_ms"] for r in rows)
    fp8_ms = sum(r["fp8_ms"] for r in rows)
    return {"who": "gemm_shapes", "model": model, "M": m, "gemms": rows, "bf16_ms": bf16_ms,
            "fp8_ms": fp8_ms, "fp8_over_bf16": fp8_ms / bf16_ms,
            "timing": f"median of {reps} repeats of {inner} calls after {warmup}, CUDA events",
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="llama-8b,llama-1.3b,llama-125m",
                    help=f"comma-separated, of: {', '.join(ARCH)}")
    ap.add_argument("--tokens", type=int, default=16384, help="M, tokens per GEMM")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--inner", type=int, default=10)
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in ARCH]
    if unknown or not models:
        ap.exit(2, f"gemm_shapes_bench: unknown model {unknown[0] if unknown else '(none)'} "
                   f"(known: {', '.join(ARCH)})\n")
    if args.tokens <= 0 or args.tokens % 16 or min(args.warmup, args.reps - 1, args.inner - 1) < 0:
        ap.exit(2, "gemm_shapes_bench: --tokens must be a positive multiple of 16 (FP8 GEMMs), "
                   "--reps and --inner at least 1, --warmup at least 0\n")
    if not torch.cuda.is_available():
        ap.exit(2, "gemm_shapes_bench: no CUDA device\n")
    for model in models:
        r = bench_model(model, args.tokens, args.warmup, args.reps, args.inner)
        print(json.dumps(r), flush=True)
        print(f"  {model}: the 21 GEMMs of a block at M = {args.tokens}: BF16 {r['bf16_ms']:.3f} ms, "
              f"FP8 {r['fp8_ms']:.3f} ms, FP8 ÷ BF16 {r['fp8_over_bf16']:.3f} (GEMM-only)",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
