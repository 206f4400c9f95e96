#!/usr/bin/env python3
"""How Hopper's FP8 tensor cores accumulate, against the emulation's FP32 accumulation, measured
on MXFP4 operands (issue 20: may MXFP4 GEMMs run on FP8 tensor cores where that is exact?).

For each shape and input distribution, A (M x K) and B (N x K) are quantized to MXFP4 along K
(32-element blocks, E8M0 scale 2^(floor(log2 amax) - 2), E2M1 round to nearest, saturating at 6:
the floor rule of docs/design.md §3; ties are not broken to even here, which a study of errors at
the 1e-3 level does not see). Their values are then re-expressed as E4M3 codes with ONE scale per
tensor, 2^(largest block exponent - 6), which is exact for every block within 14 binades of the
tensor's largest (the share of elements that are not is printed). The products, each against the
float64 product of the same MXFP4 values (exact products, float64 sums):

  fp8          torch._scaled_mm on the E4M3 codes, FP32 output, use_fast_accum=False
  fp8 fast     the same with use_fast_accum=True
  bf16         torch.mm on the same values as BF16 (exact), FP32 output: the emulation's GEMM
  bf16 out     the same with a BF16 output, as the trainer keeps it
and, for scale, the MXFP4 quantization error itself: ||Q(A) Q(B)^T - A B^T|| / ||A B^T||.

Prints one JSON line per case and a table. Needs a CUDA GPU with FP8 tensor cores (sm_89+).
Usage: fp8_accumulation_study.py [--m 16384] [--n 2048] [--k 2048,5504,14336]
"""
import argparse
import json
import sys

import torch

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4(x):
    """MXFP4 values of x (rows x K) along K and each block's exponent."""
    rows, k = x.shape
    b = x.reshape(rows, k // 32, 32)
    amax = b.abs().amax(dim=2, keepdim=True)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 2, torch.full_like(amax, -127.0))
    y = (b / torch.exp2(e)).clamp(-6, 6)
    grid = E2M1.to(x.device)
    idx = (y.abs().unsqueeze(-1) - grid).abs().argmin(dim=-1)
    q = grid[idx] * torch.sign(y) * torch.exp2(e)
    return q.reshape(rows, k), e.squeeze(-1)


def as_e4m3(q, e):
    """q as E4M3 codes with one per-tensor scale 2^(max e - 6), and the share of elements that
    the codes do not hold exactly."""
    t = e.max() - 6
    scale = torch.exp2(t)
    codes = (q / scale).to(torch.float8_e4m3fn)
    inexact = ((codes.float() * scale) != q).float().mean().item()
    return codes, scale.float().reshape(()), inexact


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def case(m, n, k, dist, gen):
    def draw(rows):
        x = torch.randn(rows, k, device="cuda", generator=gen)
        if dist == "heavy-tailed":
            x = x * torch.exp(2 * torch.randn(rows, k, device="cuda", generator=gen))
        return x
    a, b = draw(m), draw(n)
    qa, ea = mxfp4(a)
    qb, eb = mxfp4(b)
    ref = qa.double() @ qb.double().t()
    exact = a.double() @ b.double().t()
    ca, sa, ia = as_e4m3(qa, ea)
    cb, sb, ib = as_e4m3(qb, eb)
    fp8 = torch._scaled_mm(ca, cb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32, use_fast_accum=False)
    fp8_fast = torch._scaled_mm(ca, cb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32, use_fast_accum=True)
    bf16 = torch.mm(qa.bfloat16(), qb.bfloat16().t(), out_dtype=torch.float32)  # mm.dtype: torch >= 2.8
    bf16_out = torch.mm(qa.bfloat16(), qb.bfloat16().t())
    return {"m": m, "n": n, "k": k, "inputs": dist,
            "inexact_share_a": ia, "inexact_share_b": ib,
            "fp8": rel(fp8, ref), "fp8_fast": rel(fp8_fast, ref),
            "bf16": rel(bf16, ref), "bf16_out": rel(bf16_out, ref),
            "mxfp4_quantization": rel(ref, exact),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=16384)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", default="2048,5504,14336")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fp8_accumulation_study: no CUDA GPU", file=sys.stderr)
        return 2
    ks = [int(v) for v in args.k.split(",")]
    if any(v % 32 for v in ks):
        print(f"fp8_accumulation_study: every K must be a multiple of 32, got {args.k}", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for dist in ("gaussian", "heavy-tailed"):
        for k in ks:
            r = case(args.m, args.n, k, dist, gen)
            print(json.dumps(r), flush=True)
            rows.append(r)
    print("\n| inputs | K | inexact in E4M3 (A, B) | FP8 TC | FP8 TC fast accum | BF16 TC, FP32 out | "
          "BF16 TC, BF16 out | MXFP4 quantization |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['inputs']} | {r['k']} | {r['inexact_share_a']:.2e}, {r['inexact_share_b']:.2e} | "
              f"{r['fp8']:.2e} | {r['fp8_fast']:.2e} | {r['bf16']:.2e} | {r['bf16_out']:.2e} | "
              f"{r['mxfp4_quantization']:.2e} |")
    print("relative Frobenius errors against the float64 product of the same MXFP4 values "
          "(the last column: of the MXFP4 product against the unquantized one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
