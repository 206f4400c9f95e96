#!/usr/bin/env python3
"""The Llama shapes of the speed benchmark, and model FLOPs per token (docs/performance.md, "Speed").

Mirrors trainer/plan/src/model_presets.cpp for the presets the benchmark uses;
speed-report.py checks the parameter count against each run's run_start event, so a drift
between the two is caught, not silently measured. Plain python (no torch): the report and its
tests import it on machines without torch.

Usage (for bash): llama_shapes.py bench [MODEL[,MODEL…]]
  prints, per benchmarked model (all, or those named), one line:
  MODEL SEQ STEP_TOKENS MICRO_TOKENS STEPS CHECKPOINT(0|1) PEER_WARMUP PEER_STEPS
  and exits 2 naming a model it does not know.
"""
import sys

# d_model, layers, heads, KV heads, FFN width, as model_presets.cpp has them.
ARCH = {
    "llama-20m": dict(d=512, layers=6, heads=8, kv_heads=4, ffn=1408),
    "llama-125m": dict(d=768, layers=12, heads=12, kv_heads=12, ffn=3072),
    "llama-1.3b": dict(d=2048, layers=24, heads=16, kv_heads=16, ffn=5504),
    "llama-8b": dict(d=4096, layers=32, heads=32, kv_heads=8, ffn=14336),
}

# The step shapes the benchmark trains at: tokens per sequence, per micro-batch and per optimizer
# step; our trainer's steps (the rate is the median of the train events after step 3); activation
# checkpointing (both ours and the peer's); the peer's untimed and timed steps.
# llama-1.3b is gpu-scale-check.sh's part 2 (seq 2048, 65,536 tokens a step as 4 micro-batches,
# activation checkpointing: ~25 GiB on one GPU); its steps are few so that each run, start-up
# included, stays well under a minute and a half (about 1.6-2.4 s a step on an H100).
BENCH = {
    "llama-20m": dict(seq=256, micro=16384, step=16384, steps=30, checkpoint=False,
                      peer_warmup=5, peer_steps=20),
    "llama-125m": dict(seq=512, micro=16384, step=65536, steps=30, checkpoint=False,
                       peer_warmup=5, peer_steps=20),
    "llama-1.3b": dict(seq=2048, micro=16384, step=65536, steps=10, checkpoint=True,
                       peer_warmup=3, peer_steps=8),
}

# Architecture and step shape together, per benchmarked model (what peer_llama.py builds).
SHAPES = {m: {**ARCH[m], **b} for m, b in BENCH.items()}


def linears(s):
    """The 7 linear layers of one block as (name, out N, in K): y = x Wᵀ with W of N × K."""
    d, kv = s["d"], s["kv_heads"] * (s["d"] // s["heads"])
    return [("q", d, d), ("k", kv, d), ("v", kv, d), ("o", d, d),
            ("gate", s["ffn"], d), ("up", s["ffn"], d), ("down", d, s["ffn"])]


def gemm_params(s, vocab):
    """Parameters that are GEMM weights: q, k, v, o, gate, up, down per layer, and the LM head."""
    per_layer = sum(n * k for _, n, k in linears(s))
    return s["layers"] * per_layer + s["d"] * vocab


def all_params(s, vocab):
    """Everything: GEMM weights, the embedding, the 2 norms per layer and the final norm."""
    return gemm_params(s, vocab) + vocab * s["d"] + (2 * s["layers"] + 1) * s["d"]


def attention_flops_per_token(s):
    """Attention's two batched matmuls, forward + backward: 12 x layers x d_model x seq_len
    (PaLM's count, the causal mask not halved)."""
    return 12 * s["layers"] * s["d"] * s["seq"]


def flops_per_token(s, vocab):
    """6 x GEMM parameters (forward + both backward GEMMs) + attention's two batched matmuls.
    Model FLOPs: a recomputed forward (activation checkpointing) is not counted."""
    return 6 * gemm_params(s, vocab) + attention_flops_per_token(s)


def main(argv):
    if not argv or argv[0] != "bench" or len(argv) > 2:
        print("usage: llama_shapes.py bench [MODEL[,MODEL…]]", file=sys.stderr)
        return 2
    models = list(BENCH) if len(argv) == 1 else argv[1].replace(",", " ").split()
    for m in models:
        if m not in BENCH:
            print(f"llama_shapes: the speed bench has no model '{m}' (it has: {', '.join(BENCH)})",
                  file=sys.stderr)
            return 2
    for m in models:
        b = BENCH[m]
        print(m, b["seq"], b["step"], b["micro"], b["steps"], int(b["checkpoint"]), b["peer_warmup"],
              b["peer_steps"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
