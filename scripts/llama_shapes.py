"""The Llama shapes of the speed benchmark, and model FLOPs per token (docs/performance.md, "Speed").

Mirrors trainer/core/src/model_presets.cpp for the two presets the benchmark uses;
speed-report.py checks the parameter count against each run's run_start event, so a drift
between the two is caught, not silently measured.
"""

# d_model, layers, heads, KV heads, FFN width; the step shapes of the benchmark (tokens per
# sequence, per micro-batch, per optimizer step).
SHAPES = {
    "llama-20m": dict(d=512, layers=6, heads=8, kv_heads=4, ffn=1408, seq=256, micro=16384, step=16384),
    "llama-125m": dict(d=768, layers=12, heads=12, kv_heads=12, ffn=3072, seq=512, micro=16384, step=65536),
}


def gemm_params(s, vocab):
    """Parameters that are GEMM weights: q, k, v, o, gate, up, down per layer, and the LM head."""
    d, kv = s["d"], s["kv_heads"] * (s["d"] // s["heads"])
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * s["ffn"]
    return s["layers"] * per_layer + d * vocab


def all_params(s, vocab):
    """Everything: GEMM weights, the embedding, the 2 norms per layer and the final norm."""
    return gemm_params(s, vocab) + vocab * s["d"] + (2 * s["layers"] + 1) * s["d"]


def flops_per_token(s, vocab):
    """6 x GEMM parameters (forward + both backward GEMMs) + attention's two batched matmuls,
    12 x layers x d_model x seq_len (PaLM's count: forward + backward, the causal mask not
    halved)."""
    return 6 * gemm_params(s, vocab) + 12 * s["layers"] * s["d"] * s["seq"]
