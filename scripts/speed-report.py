#!/usr/bin/env python3
"""The speed benchmark's report (scripts/gpu-speed-bench.sh): our trainer's tokens/s per model and
arm (median of the sampled train events after step 3, from each run's events.jsonl), the compiled
PyTorch peer's (peer_llama.py), and the targets of docs/design.md §9 with the baseline each one
divides by — all measured in the same run.

Usage: speed-report.py OUT_DIR   (OUT_DIR holds run directories ours-MODEL-ARM/ and results.jsonl)
"""
import json
import os
import statistics
import sys

from llama_shapes import SHAPES, all_params, flops_per_token

ARMS = ["bf16", "fp8", "mxfp4", "mxfp4+h16"]
PEER_ARM = {"bf16": "bf16", "fp8": "fp8", "mxfp4": "fdw", "mxfp4+h16": "fdw+h16"}
LABEL = {"bf16": "BF16", "fp8": "FP8 (F+D+W)", "mxfp4": "MXFP4 F+D+W", "mxfp4+h16": "MXFP4 F+D+W+H16"}


def ours(out, model, arm):
    path = os.path.join(out, f"ours-{model}-{arm}", "events.jsonl")
    try:
        events = [json.loads(l) for l in open(path) if l.endswith("\n")]
    except (OSError, ValueError):
        return None
    tps = [e["tokens_per_s"] for e in events if e.get("kind") == "train" and e.get("step", 0) > 3]
    ends = [e for e in events if e.get("kind") == "run_end"]
    starts = [e for e in events if e.get("kind") == "run_start"]
    if not tps or not ends:
        return None
    return {"tokens_per_s": statistics.median(tps), "peak_gib": ends[-1].get("peak_gpu_bytes", 0) / 2 ** 30,
            "params": starts[-1].get("params") if starts else None}


def main():
    out = sys.argv[1]
    lines = []
    try:
        lines = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
    except (OSError, ValueError) as e:
        sys.exit(f"speed-report: {out}/results.jsonl: {e}")
    base = next((l for l in lines if l.get("who") == "baseline"), None)
    peer = {(l["model"], l["arm"]): l for l in lines if l.get("who") == "peer"}
    vocab = next((l["vocab"] for l in lines if l.get("who") == "data"), 4096)
    if base:
        print(f"baselines (same run, {base['device']}, torch {base['torch']}): BF16 cuBLAS 8192³ "
              f"{base['bf16_tflops']:.0f} TFLOP/s, device copy {base['copy_tbs']:.2f} TB/s")
    targets = []
    for model, s in SHAPES.items():
        rows = {arm: ours(out, model, arm) for arm in ARMS}
        if not any(rows.values()):
            continue
        fpt = flops_per_token(s, vocab)
        print(f"\n{model}: seq {s['seq']}, {s['step']:,} tokens/step, {fpt / 1e6:.0f} MFLOP/token")
        print("| arm | ours tokens/s | step × our BF16 | peer tokens/s | ours ÷ peer | MFU | peak GiB | peak × BF16 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        bf = rows.get("bf16")
        for arm in ARMS:
            r = rows[arm]
            if not r:
                print(f"| {LABEL[arm]} | (no run) | | | | | | |")
                continue
            if r["params"] is not None and r["params"] != all_params(s, vocab):
                print(f"speed-report: {model}: run_start says {r['params']} parameters, llama_shapes.py "
                      f"{all_params(s, vocab)}: the shapes drifted", file=sys.stderr)
            p = peer.get((model, PEER_ARM[arm]))
            step_x = bf["tokens_per_s"] / r["tokens_per_s"] if bf else None
            mfu = r["tokens_per_s"] * fpt / (base["bf16_tflops"] * 1e12) if base else None
            mem_x = r["peak_gib"] / bf["peak_gib"] if bf and bf["peak_gib"] else None
            fmt = lambda v, f: (f.format(v) if v is not None else "–")
            print(f"| {LABEL[arm]} | {r['tokens_per_s']:,.0f} | {fmt(step_x, '{:.3f}×')} | "
                  f"{fmt(p and p['tokens_per_s'], '{:,.0f}')} | "
                  f"{fmt(p and r['tokens_per_s'] / p['tokens_per_s'], '{:.2f}×')} | "
                  f"{fmt(mfu and 100 * mfu, '{:.1f} %')} | {r['peak_gib']:.1f} | {fmt(mem_x, '{:.2f}×')} |")
            if p:
                targets.append((f"{model} {LABEL[arm]}: ours ÷ peer ≥ 1", r["tokens_per_s"] / p["tokens_per_s"], 1.0, ">="))
            if arm == "bf16" and mfu is not None:
                want = 0.50 if model == "llama-125m" else 0.35
                targets.append((f"{model} BF16 MFU (÷ {base['bf16_tflops']:.0f} TFLOP/s)", mfu, want, ">="))
            if arm == "mxfp4+h16" and step_x is not None:
                targets.append((f"{model} MXFP4 F+D+W+H16 step ÷ BF16 step", step_x, 1.05, "<="))
            if arm == "fp8" and step_x is not None and model == "llama-125m":
                targets.append((f"{model} FP8 step ÷ BF16 step", step_x, 0.90, "<="))
            if arm.startswith("mxfp4") and mem_x is not None:
                targets.append((f"{model} {LABEL[arm]} peak memory ÷ BF16", mem_x, 1.10, "<="))
    print("\n| target | measured | wanted | met |")
    print("|---|---:|---:|---|")
    for name, value, want, op in targets:
        met = value >= want if op == ">=" else value <= want
        print(f"| {name} | {value:.3f} | {op} {want:.2f} | {'yes' if met else 'NO'} |")


if __name__ == "__main__":
    main()
