#!/usr/bin/env python3
"""The peer a user would pick instead of mxablate (issue 14, docs/performance.md "Speed"): the same
Llama shapes in plain PyTorch — bf16 autocast, grouped-query SDPA, nn.RMSNorm, fused AdamW — under
torch.compile, with FP8 / MXFP4 fake quantization written as ordinary tensor ops inside a custom
autograd function. It is the baseline our trainer's tokens/s is divided by, measured in the same
run by scripts/gpu-speed-bench.sh. Random tokens: throughput does not depend on the data.

Arms are named as everywhere in the bench (scripts/bench_arms.py, the recipes' names): --arm FDW+H16
runs this program's "fdw+h16" fake quantization. Where the model's bench shape checkpoints activations
(llama_shapes.py: llama-1.3b), the peer does too, as torchtitan does it: every block wrapped in
non-reentrant torch.utils.checkpoint and compiled on its own (one compiled graph that all blocks
share), the final norm, LM head and loss compiled as one more region; otherwise the whole model
is compiled as one graph.

Usage: peer_llama.py --model MODEL --arm ARM [--vocab V] [--steps N] [--warmup N]
Prints one JSON line: {"who": "peer", "model", "arm", "mode", "tokens_per_s", "ms_per_step",
"peak_gib", "checkpoint", "compile", ...}.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch.utils.checkpoint

from bench_arms import ARMS  # noqa: E402  (beside this script)
from llama_shapes import SHAPES  # noqa: E402

# ---- fake quantization as tensor ops ----------------------------------------------------------

E2M1_MAX = 6.0


def round_e2m1(v):
    """RNE onto the E2M1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6 (sign kept)."""
    a = v.abs().clamp(max=E2M1_MAX)
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    return torch.sign(v) * (torch.round(a / step) * step).clamp(max=E2M1_MAX)


def mxfp4(x, dim):
    """MXFP4 (OCP floor rule) with 32-element blocks along `dim`; returns the dequantized bf16."""
    x = x.float()
    moved = x.movedim(dim, -1)
    shape = moved.shape
    blocks = moved.reshape(*shape[:-1], shape[-1] // 32, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    # An all-zero block gets a tiny normal scale (Triton flushes subnormals: 2^-127 became 0, 0/0).
    e = torch.floor(torch.log2(amax.clamp(min=2.0 ** -100))) - 2
    scale = torch.exp2(e)
    q = round_e2m1(blocks / scale) * scale
    return q.reshape(shape).movedim(-1, dim).to(torch.bfloat16)


def fp8(x, dtype):
    """Per-tensor current scaling into E4M3 / E5M2, dequantized to bf16."""
    x = x.float()
    amax = x.abs().amax().clamp(min=1e-30)
    scale = amax / torch.finfo(dtype).max
    return ((x / scale).to(dtype).float() * scale).to(torch.bfloat16)


def hadamard16(x, dim):
    """x rotated block-diagonally by the normalized 16-point Sylvester matrix along `dim`."""
    h = torch.tensor([[1.0]], device=x.device)
    while h.shape[0] < 16:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = (h / 4.0).to(x.dtype)
    moved = x.movedim(dim, -1)
    shape = moved.shape
    r = moved.reshape(*shape[:-1], shape[-1] // 16, 16) @ h
    return r.reshape(shape).movedim(-1, dim)


class QuantLinearFn(torch.autograd.Function):
    """y = Q(x) Q(w)ᵀ; dx = Q(dy) Q(w); dw = Q(dy)ᵀ Q(x), each operand blocked along its GEMM's
    reduction dimension, as mxablate's MXLinear does."""

    @staticmethod
    def forward(ctx, x, w, arm):
        ctx.arm = arm
        ctx.save_for_backward(x, w)
        if arm == "fp8":
            return fp8(x, torch.float8_e4m3fn) @ fp8(w, torch.float8_e4m3fn).t()
        return mxfp4(x, -1) @ mxfp4(w, -1).t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        if ctx.arm == "fp8":
            g = fp8(dy, torch.float8_e5m2)
            return g @ fp8(w, torch.float8_e4m3fn), g.t() @ fp8(x, torch.float8_e4m3fn), None
        dx = mxfp4(dy, -1) @ mxfp4(w, 0)
        if ctx.arm == "fdw+h16":  # the rotation along the tokens (Wgrad's reduction) cancels
            dyr, xr = hadamard16(dy.float(), 0), hadamard16(x.float(), 0)
            dw = mxfp4(dyr, 0).t() @ mxfp4(xr, 0)
        else:
            dw = mxfp4(dy, 0).t() @ mxfp4(x, 0)
        return dx, dw, None


class Linear(nn.Linear):
    def __init__(self, i, o, arm):
        super().__init__(i, o, bias=False)
        self.arm = arm

    def forward(self, x):
        if self.arm == "bf16":
            return super().forward(x)
        lead = x.shape[:-1]
        y = QuantLinearFn.apply(x.reshape(-1, x.shape[-1]).to(torch.bfloat16), self.weight, self.arm)
        return y.reshape(*lead, -1)


def rope_tables(seq, head_dim, device):
    inv = 10000.0 ** (-torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    ang = torch.outer(torch.arange(seq, device=device).float(), inv)
    return ang.cos(), ang.sin()


def rope(x, cos, sin):  # x (B, H, T, D), rotate-half layout
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).type_as(x)


class Block(nn.Module):
    def __init__(self, s, arm):
        super().__init__()
        d, hd = s["d"], s["d"] // s["heads"]
        self.h, self.kv, self.hd = s["heads"], s["kv_heads"], hd
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.q, self.k = Linear(d, d, arm), Linear(d, self.kv * hd, arm)
        self.v, self.o = Linear(d, self.kv * hd, arm), Linear(d, d, arm)
        self.gate, self.up = Linear(d, s["ffn"], arm), Linear(d, s["ffn"], arm)
        self.down = Linear(s["ffn"], d, arm)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.n1(x)
        q = rope(self.q(h).view(b, t, self.h, self.hd).transpose(1, 2), cos, sin)
        k = rope(self.k(h).view(b, t, self.kv, self.hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward (non-reentrant checkpointing, as
    torchtitan wraps each block before compiling it); only its input is kept."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x, cos, sin):
        return torch.utils.checkpoint.checkpoint(self.block, x, cos, sin, use_reentrant=False)


class Llama(nn.Module):
    def __init__(self, s, vocab, arm):
        super().__init__()
        self.emb = nn.Embedding(vocab, s["d"])
        self.blocks = nn.ModuleList(Block(s, arm) for _ in range(s["layers"]))
        self.norm = nn.RMSNorm(s["d"], eps=1e-5)
        self.head = nn.Linear(s["d"], vocab, bias=False)  # plain BF16, as mxablate's default
        cos, sin = rope_tables(s["seq"], s["d"] // s["heads"], "cuda")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens, targets):
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        return self.head_loss(x, targets)

    def head_loss(self, x, targets):
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(SHAPES), required=True)
    ap.add_argument("--arm", choices=list(ARMS), required=True, help="an arm of bench_arms.py")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--steps", type=int, help="timed optimizer steps (default: llama_shapes.py's)")
    ap.add_argument("--warmup", type=int, help="untimed steps, compilation included (default: llama_shapes.py's)")
    ap.add_argument("--no-checkpoint", action="store_true",
                    help="recompute nothing where the shape checkpoints its blocks (beside ours at "
                         "activation_checkpointing: false)")
    args = ap.parse_args()
    s = SHAPES[args.model]
    steps = args.steps or s["peer_steps"]
    warmup = args.warmup if args.warmup is not None else s["peer_warmup"]
    mode = ARMS[args.arm]["peer"]
    torch.manual_seed(0)
    model = Llama(s, args.vocab, mode).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-5,
                            weight_decay=0.1, fused=True)
    checkpoint = s["checkpoint"] and not args.no_checkpoint
    if s["checkpoint"]:
        # Regional compilation: the blocks are one module type, so one compiled graph serves all
        # of them (a whole 24-block graph would take minutes to compile, with checkpointing).
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = torch.compile(Checkpointed(blk) if checkpoint else blk)
        model.head_loss = torch.compile(model.head_loss)
        loss_fn, compiled = model, "per block, checkpointed" if checkpoint else "per block"
    else:
        loss_fn, compiled = torch.compile(model), "whole model"
    micro_seqs = s["micro"] // s["seq"]
    micros = s["step"] // s["micro"]
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [torch.randint(0, args.vocab, (micro_seqs, s["seq"] + 1), device="cuda", generator=gen)
               for _ in range(micros)]

    def step():
        for b in batches:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(b[:, :-1], b[:, 1:])
            (loss / micros).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({
        "who": "peer", "model": args.model, "arm": args.arm, "mode": mode, "seq": s["seq"],
        "tokens_per_step": s["step"], "micro_tokens": s["micro"], "checkpoint": checkpoint,
        "compile": compiled, "vocab": args.vocab, "steps": steps,
        "tokens_per_s": s["step"] * steps / dt, "ms_per_step": 1e3 * dt / steps,
        "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30, "warmup_s": warm,
        "final_loss": float(loss.detach()), "torch": torch.__version__,
        "device": torch.cuda.get_device_name()}), flush=True)
    assert math.isfinite(float(loss)), "peer loss is not finite"


if __name__ == "__main__":
    main()
