#!/usr/bin/env python3
"""The speed benchmark's report (scripts/gpu-speed-bench.sh): per model, our trainer's tokens/s
in each arm of bench_arms.py (named as the recipes name them; the median of its train events
after step 3), the compiled PyTorch peer's (peer_llama.py), the GEMM-level figures of one block
(gemm_shapes_bench.py), and every speed target with the figure it divides by and its verdict. A
figure that was not measured is said to be so; nothing is estimated.

A results file holds one or more calls of the bench, each from its header line ({"who": "call",
"gpu": …}) to the next. Several files (the parts of one benchmark, run in separate device calls)
are read together only where every call ran on the same GPU model: figures of different GPUs
are not compared (exit 2, one line). Where one figure was measured in several calls, the last
one read is used; the report names the call of every figure. A line naming an arm bench_arms.py
does not know (an arm's name before the bench took the recipes' names among them) is refused
(exit 2, one line).

Usage: speed-report.py RESULTS [RESULTS…]   (a results.jsonl, or a directory holding one)
       speed-report.py --ours-line RUN_DIR MODEL ARM EXIT_CODE
           prints the JSON line the bench appends for one of our runs (its config.json, events and
           output.txt, read by run_figures.py: the events through `mxablate ingest` and `query`)
       speed-report.py --compare BEFORE AFTER
           before against after (scripts/gpu-ab-bench.sh): each arm in each tree's results file,
           after ÷ before, and each tree's step ÷ its own BF16 step

Plain python (no torch): its tests run on machines without it.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_figures  # noqa: E402
from bench_arms import ARMS, UnknownArm, arm as known_arm  # noqa: E402
from llama_shapes import (ARCH, SHAPES, all_params, attention_flops_per_token,  # noqa: E402
                          flops_per_token, gemm_params)


class BadInput(Exception):
    pass


def same_recompute(ours, peer):
    """Whether our run and the peer recompute the same work: the peer checkpoints every block or
    none; ours says what it recomputed in run_start (lines from before it did: the config's
    setting, true being every block)."""
    ck = peer.get("checkpoint")
    rc = ours.get("recompute")
    if rc:
        every, none = rc["blocks"] == rc["of"], rc["blocks"] == 0 and not rc["selective"]
    else:
        every, none = bool(ours.get("checkpoint")), not ours.get("checkpoint")
    return (ck is True and every) or (ck is False and none)


# ---- one of our runs → its results line ---------------------------------------------------------

def ours_line(run_dir, model, arm, rc):
    line = {"who": "ours", "model": model, "arm": arm, "exit": rc, "run": os.path.basename(run_dir.rstrip("/"))}
    cfg = run_figures.config(run_dir)
    if cfg:
        tr = cfg.get("train", {})
        line.update(tokens_per_step=tr.get("global_batch_tokens"), micro_tokens=tr.get("micro_batch_tokens"),
                    seq=cfg.get("data", {}).get("seq_len"), checkpoint=bool(tr.get("activation_checkpointing")))
    not_read = None
    try:
        run = run_figures.load(run_dir)
    except run_figures.RunFiguresError as e:
        run, not_read = run_figures.Run(), str(e)
    recompute = run_figures.recompute_of(run)
    if recompute:
        line["recompute"] = recompute
    line["samples"] = len(run_figures.step_rates(run))
    tps = run_figures.median_tokens_per_s(run)
    if tps:
        line["tokens_per_s"] = tps
        if line.get("tokens_per_step"):
            line["ms_per_step"] = 1e3 * line["tokens_per_step"] / tps
    start, end = run_figures.run_start(run), run_figures.run_end(run)
    for k in ("params", "non_embedding_params", "gemm_routes", "device", "vocab_size", "cuda_graphs"):
        if start and k in start:
            line[k] = start[k]
    if run_figures.peak_gpu_gib(run) is not None:
        line["peak_gib"] = run_figures.peak_gpu_gib(run)
    if end and isinstance(end.get("mxfp4_as_fp8_tiles"), dict):
        line["mxfp4_as_fp8_tiles"] = end["mxfp4_as_fp8_tiles"]
    if rc != 0 or not tps:
        line["error"] = (not_read or run_figures.last_output_line(run_dir))[:300]
    return line


# ---- reading results files --------------------------------------------------------------------

def load_calls(paths):
    """Every call in the files, in order: {"n", "file", "gpu", "host", "started", "vocab", "lines"}."""
    calls = []
    for path in paths:
        file = os.path.join(path, "results.jsonl") if os.path.isdir(path) else path
        try:
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise BadInput(f"{file}: {e.strerror or e}")
        current = None
        for i, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                l = json.loads(raw)
            except ValueError:
                raise BadInput(f"{file}:{i}: not a JSON line")
            if not isinstance(l, dict):
                raise BadInput(f"{file}:{i}: not a JSON object")
            if l.get("who") in ("ours", "peer") and "arm" in l:
                try:
                    known_arm(l["arm"])
                except UnknownArm as e:
                    raise BadInput(f"{file}:{i}: {e}")
            if l.get("who") == "call" or current is None:
                # Lines before any header (a file of the bench before headers existed) are a call
                # whose GPU is whatever its lines name.
                current = {"n": len(calls) + 1, "file": file, "line": i, "lines": [],
                           "gpu": None, "host": None, "started": None, "vocab": None}
                calls.append(current)
            if l.get("who") == "call":
                current.update(gpu=l.get("gpu"), host=l.get("host"), started=l.get("started"), vocab=l.get("vocab"))
                continue
            current["lines"].append(l)
            if l.get("who") == "data" and current["vocab"] is None:
                current["vocab"] = l.get("vocab")
            if current["gpu"] is None and isinstance(l.get("device"), str) and l.get("who") != "ours":
                current["gpu"] = l["device"]
    calls = [c for c in calls if c["lines"] or c["gpu"]]
    if not calls:
        raise BadInput(f"{', '.join(paths)}: no results")
    return calls


def check_same_machine(calls):
    """Refuses (BadInput) calls on different GPU models or vocabularies; returns notes."""
    notes = []
    if len(calls) > 1:
        unknown = [c for c in calls if not c["gpu"]]
        if unknown:
            c = unknown[0]
            raise BadInput(f"{c['file']} (call {c['n']}) does not record its GPU: figures of several calls are "
                           f"compared only where they are known to come from the same GPU")
        first = calls[0]
        for c in calls[1:]:
            if c["gpu"] != first["gpu"]:
                raise BadInput(f"{c['file']} (call {c['n']}) was measured on {c['gpu']}, {first['file']} "
                               f"(call {first['n']}) on {first['gpu']}: figures of different GPUs are not compared")
        hosts = {c["host"] for c in calls if c["host"]}
        if len(hosts) > 1:
            notes.append(f"the calls ran on {len(hosts)} different hosts with the same GPU model ({first['gpu']}): "
                         "a ratio whose figures come from different calls compares two machines of one kind")
    vocabs = {c["vocab"] for c in calls if c["vocab"] is not None}
    if len(vocabs) > 1:
        raise BadInput(f"the calls trained at different vocabularies ({', '.join(map(str, sorted(vocabs)))}): "
                       "their models differ, so their figures are not compared")
    return notes


def collect(calls):
    """The latest figure of each kind, each tagged with its call number ("call")."""
    f = {"baseline": None, "ours": {}, "peer": {}, "gemm": {}}
    for c in calls:
        for l in c["lines"]:
            who = l.get("who")
            tagged = {**l, "call": c["n"]}
            if who == "baseline":
                f["baseline"] = tagged
            elif who == "ours" and l.get("model") and l.get("arm"):
                f["ours"][(l["model"], l["arm"])] = tagged
            elif who == "peer" and l.get("model") and l.get("arm"):
                f["peer"][(l["model"], ARMS[l["arm"]]["peer"])] = tagged
            elif who == "gemm_shapes" and l.get("model"):
                f["gemm"][l["model"]] = tagged
    return f


# ---- figures ----------------------------------------------------------------------------------

def peak_bf16(gpu):
    """The dense BF16 tensor-core peak of the GPU in FLOP/s, where we know it: the H100 SXM
    (989 TFLOP/s; its device name is "NVIDIA H100 80GB HBM3") and the H200 (the same tensor cores
    and clocks: 989). Other GPUs (H100 PCIe and NVL among them) have other peaks: None."""
    if not gpu or "PCIe" in gpu or "NVL" in gpu:
        return None
    if "H200" in gpu or ("H100" in gpu and ("HBM3" in gpu or "SXM" in gpu)):
        return 989e12
    return None


def usable(r):
    return bool(r) and r.get("exit") == 0 and bool(r.get("tokens_per_s"))


def route_problem(arm, r):
    """Why run r's GEMMs did not run where the arm means them to (None if they did or r does not say)."""
    routes = r.get("gemm_routes")
    if not isinstance(routes, dict):
        return None
    for prec, want in ARMS[arm]["routes"].items():
        if routes.get(prec) != want:
            return f"run_start says its {prec} GEMMs ran {routes.get(prec)}, the arm means {want}"
    return None


def exact_share(r):
    """The share of an fp8-where-exact run's MXFP4 GEMM output tiles kept from FP8 tensor cores
    (run_end's mxfp4_as_fp8_tiles; the rest the fix-up recomputed), or None for other runs."""
    tiles = r.get("mxfp4_as_fp8_tiles") if r else None
    if not isinstance(tiles, dict):
        return None
    tc = total = 0
    for g in tiles.values():
        if isinstance(g, dict):
            tc += g.get("tensor_cores", 0)
            total += g.get("tensor_cores", 0) + g.get("recomputed", 0)
    return tc / total if total else None


def calls_text(*figs):
    ns = sorted({f["call"] for f in figs if f})
    return f"call {ns[0]}" if len(ns) == 1 else "calls " + ", ".join(map(str, ns)) + " (different calls)"


def fmt(v, spec, missing="–"):
    return missing if v is None else format(v, spec)


def shape_of(model, r=None):
    s = dict(SHAPES.get(model) or ARCH[model])
    if r and r.get("seq"):
        s["seq"] = r["seq"]
    return s


class Report:
    def __init__(self, calls):
        self.calls = calls
        self.f = collect(calls)
        self.gpu = next((c["gpu"] for c in calls if c["gpu"]), None)
        self.vocab = next((c["vocab"] for c in calls if c["vocab"] is not None), None)
        self.peak = peak_bf16(self.gpu)

    def ours(self, model, arm):
        r = self.f["ours"].get((model, arm))
        return r if usable(r) and not route_problem(arm, r) else None

    def peer(self, model, arm):
        return self.f["peer"].get((model, ARMS[arm]["peer"]))

    def mfu(self, model, r):
        if not (self.peak and self.vocab and r):
            return None
        return r["tokens_per_s"] * flops_per_token(shape_of(model, r), self.vocab) / self.peak

    # -- the per-model tables
    def print_tables(self, out):
        b = self.f["baseline"]
        if b:
            print(f"baselines (call {b['call']}, {b.get('device')}, torch {b.get('torch')}): BF16 cuBLAS 8192³ "
                  f"{b['bf16_tflops']:.0f} TFLOP/s, device copy {b['copy_tbs']:.2f} TB/s", file=out)
        models = [m for m in SHAPES if any(k[0] == m for k in list(self.f["ours"]) + list(self.f["peer"]))]
        for model in models:
            s = SHAPES[model]
            fpt = flops_per_token(s, self.vocab) if self.vocab else None
            print(f"\n{model}: seq {s['seq']}, {s['step']:,} tokens/step in micro-batches of {s['micro']:,}"
                  f"{', activation checkpointing' if s['checkpoint'] else ''}"
                  + (f", {fpt / 1e9:.2f} GFLOP/token (model FLOPs)" if fpt else ""), file=out)
            print("| arm | ours tokens/s | ms/step | step ÷ our bf16 | peer tokens/s | ours ÷ peer | MFU | "
                  "peak GiB | peak ÷ bf16 | GEMM routes | call |", file=out)
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|", file=out)
            bf = self.ours(model, "bf16")
            for arm, a in ARMS.items():
                raw = self.f["ours"].get((model, arm))
                p = self.peer(model, arm)
                ptxt = (f"{p['tokens_per_s']:,.0f} ({a['peer']})" if p else "not measured")
                if not raw:
                    if p:
                        print(f"| {arm} | not measured | | | {ptxt} | | | | | | call {p['call']} |", file=out)
                    continue
                if not usable(raw):
                    print(f"| {arm} | failed (exit {raw.get('exit')}: {raw.get('error', 'no train events')}) "
                          f"| | | {ptxt} | | | | | | call {raw['call']} |", file=out)
                    continue
                problem = route_problem(arm, raw)
                r = raw
                step_x = bf["tokens_per_s"] / r["tokens_per_s"] if bf and not problem else None
                mfu = self.mfu(model, r)
                mem_x = (r.get("peak_gib") / bf["peak_gib"]) if bf and bf.get("peak_gib") and r.get("peak_gib") else None
                routes = r.get("gemm_routes")
                rtxt = (", ".join(f"{k} {routes[k]}" for k in a["routes"]) if isinstance(routes, dict) and a["routes"]
                        else ("" if a["routes"] == {} else "not recorded"))
                if problem:
                    rtxt = f"**{problem}**"
                print(f"| {arm} | {r['tokens_per_s']:,.0f} | {fmt(r.get('ms_per_step'), ',.1f')} | "
                      f"{fmt(step_x, '.3f')}{'×' if step_x is not None else ''} | {ptxt} | "
                      f"{fmt(p and r['tokens_per_s'] / p['tokens_per_s'], '.2f')}{'×' if p else ''} | "
                      f"{fmt(mfu and 100 * mfu, '.1f')}{' %' if mfu else ''} | {fmt(r.get('peak_gib'), '.1f')} | "
                      f"{fmt(mem_x, '.2f')}{'×' if mem_x is not None else ''} | {rtxt} | "
                      f"{calls_text(r, p) if p else 'call ' + str(r['call'])} |", file=out)
                if r.get("params") is not None and self.vocab and r["params"] != all_params(s, self.vocab):
                    print(f"speed-report: {model}: run_start says {r['params']} parameters, llama_shapes.py "
                          f"{all_params(s, self.vocab)}: the shapes drifted", file=sys.stderr)
            peers = [p for (m, _), p in self.f["peer"].items() if m == model]
            if peers:
                p = peers[-1]
                ck = p.get("checkpoint")
                ours_bf16 = self.ours(model, "bf16")
                what = "with activation checkpointing per block" if ck else "no recompute"
                if ck is None:
                    note = "activation checkpointing not recorded"
                elif ours_bf16 and not same_recompute(ours_bf16, p):
                    note = f"{what}, ours recomputes otherwise: not the same work"
                else:
                    note = f"{what}, as ours"
                print(f"peer: torch.compile ({p.get('compile', 'whole model')}), {note}; "
                      f"torch {p.get('torch')}; the peer's MXFP4 arms are fake quantization in tensor ops, and "
                      f"the @quant.gemm_path arms are compared with the peer's emulation of the same numerics", file=out)
        if self.f["gemm"]:
            print("\nGEMM-only: the 21 GEMMs of one block (Fprop, Dgrad, Wgrad of q, k, v, o, gate, up, down), "
                  "BF16 torch.mm against FP8 tensor-wise torch._scaled_mm (E4M3 × E4M3 forward, E5M2 × E4M3 "
                  "backward), quantization not included", file=out)
            print("| model | M | BF16 ms | FP8 ms | FP8 ÷ BF16 | Fprop FP8 ÷ BF16 | Dgrad FP8 ÷ BF16 | Wgrad FP8 ÷ BF16 | call |",
                  file=out)
            print("|---|---:|---:|---:|---:|---:|---:|---:|---|", file=out)
            for model in ARCH:
                g = self.f["gemm"].get(model)
                if not g:
                    continue
                kinds = []
                for kind in ("fprop", "dgrad", "wgrad"):
                    rows = [r for r in g.get("gemms", []) if r.get("gemm") == kind]
                    bsum, fsum = sum(r["bf16_ms"] for r in rows), sum(r["fp8_ms"] for r in rows)
                    kinds.append(f"{fsum / bsum:.3f}" if bsum else "–")
                print(f"| {model} | {g.get('M')} | {g['bf16_ms']:.3f} | {g['fp8_ms']:.3f} | "
                      f"{g['fp8_ms'] / g['bf16_ms']:.3f} | {' | '.join(kinds)} | call {g['call']} |", file=out)

    # -- the targets
    def step_target(self, model, arm, want):
        s = SHAPES[model]
        name = f"{model} {arm} step ÷ bf16 step"
        den = f"our bf16 step at {model} (seq {s['seq']}, {s['step']:,} tokens/step)"
        bf, r, raw = self.ours(model, "bf16"), self.ours(model, arm), self.f["ours"].get((model, arm))
        if not r:
            why = (route_problem(arm, raw) if usable(raw) else None) or \
                  (f"the {arm} run failed (exit {raw.get('exit')})" if raw else f"no {arm} run")
            return name, den, None, "<=", want, why, None
        if not bf:
            return name, den, None, "<=", want, "no bf16 run" if not self.f["ours"].get((model, "bf16")) \
                else "the bf16 run failed", None
        src = calls_text(bf, r)
        share = exact_share(r)
        if share is not None:
            src += f"; {100 * share:.1f} % of MXFP4 GEMM output tiles from FP8 tensor cores"
        return name, den, bf["tokens_per_s"] / r["tokens_per_s"], "<=", want, None, src

    def peer_target(self, model, want):
        s = SHAPES[model]
        name = f"{model} bf16 tokens/s ÷ the compiled peer's"
        p = self.f["peer"].get((model, "bf16"))
        den = "the compiled PyTorch peer in bf16, same shapes" + (
            (", per-block activation checkpointing" if p and p.get("checkpoint") else ", no recompute")
            if s["checkpoint"] else "")
        r = self.ours(model, "bf16")
        if not r:
            return name, den, None, ">=", want, "no bf16 run of ours", None
        if not p:
            return name, den, None, ">=", want, "no bf16 peer run", None
        if s["checkpoint"] and not same_recompute(r, p):
            return name, den, None, ">=", want, "the peer and ours recompute different work", None
        return name, den, r["tokens_per_s"] / p["tokens_per_s"], ">=", want, None, calls_text(r, p)

    def mfu_target(self, model, want):
        name = f"{model} bf16 MFU"
        den = (f"{self.peak / 1e12:.0f} TFLOP/s, the dense BF16 peak of the {self.gpu}" if self.peak
               else "the GPU's dense BF16 peak")
        r = self.ours(model, "bf16")
        if not self.peak:
            return name, den, None, ">=", want, f"dense BF16 peak of {self.gpu or 'the GPU'} not known here", None
        if not r:
            return name, den, None, ">=", want, "no bf16 run of ours", None
        if not self.vocab:
            return name, den, None, ">=", want, "the vocabulary is not recorded", None
        return name, den, self.mfu(model, r), ">=", want, None, calls_text(r)

    def gemm_target(self, model, want):
        name = f"{model} FP8 ÷ BF16, GEMM-only: the 21 GEMMs of one block"
        g = self.f["gemm"].get(model)
        den = f"BF16 torch.mm, the same 21 GEMMs at M = {g.get('M') if g else 16384:,}"
        if not g or not g.get("bf16_ms"):
            return name, den, None, "<=", want, "no GEMM-shape run (--gemm-shapes)", None
        return name, den, g["fp8_ms"] / g["bf16_ms"], "<=", want, None, calls_text(g)

    def targets(self):
        return [
            self.step_target("llama-1.3b", "fp8", 0.80),
            self.step_target("llama-1.3b", "fp8@quant.fp8_scaling=delayed", 0.80),
            self.gemm_target("llama-8b", 0.75),
            self.step_target("llama-125m", "fp8", 1.00),
            self.step_target("llama-1.3b", "FDW+H16", 1.05),
            self.step_target("llama-125m", "FDW+H16", 1.15),
            self.step_target("llama-1.3b", "FDW+H16@quant.gemm_path=fp8", 0.85),
            self.step_target("llama-1.3b", "FDW+H16@quant.gemm_path=fp8-where-exact", 0.85),
            self.peer_target("llama-125m", 1.0),
            self.peer_target("llama-1.3b", 1.0),
            self.mfu_target("llama-1.3b", 0.55),
        ]

    def print_targets(self, out):
        print("\nSpeed targets. Step ratio = our arm's time per step ÷ our bf16 time per step at the same shape "
              "(= bf16 tokens/s ÷ the arm's); the MXFP4 arms run emulated unless named @quant.gemm_path=fp8 or "
              "@quant.gemm_path=fp8-where-exact.", file=out)
        print("| target | denominator | measured | wanted | verdict | from |", file=out)
        print("|---|---|---:|---:|---|---|", file=out)
        for name, den, value, op, want, why, src in self.targets():
            pct = "MFU" in name
            show = (lambda v: f"{100 * v:.1f} %") if pct else (lambda v: f"{v:.3f}×")
            wanted = f"{'≤' if op == '<=' else '≥'} {show(want)}"
            if value is None:
                print(f"| {name} | {den} | not measured | {wanted} | not measured: {why} | |", file=out)
                continue
            met = value <= want if op == "<=" else value >= want
            print(f"| {name} | {den} | {show(value)} | {wanted} | {'met' if met else 'NOT MET'} | {src} |", file=out)
        s = SHAPES["llama-1.3b"]
        v = self.vocab
        print(f"MFU = tokens/s × (6·N + 12·layers·d_model·seq) ÷ peak, with N the GEMM weights (q, k, v, o, gate, "
              f"up, down of every block and the LM head, i.e. the non-embedding parameters plus the output "
              f"embedding; the input embedding is a lookup, the norms no GEMM: llama_shapes.py) and 12·L·d·T the "
              f"attention matmuls forward and backward (PaLM's count, causal mask not halved); a recomputed forward "
              f"(activation checkpointing) is not counted."
              + (f" llama-1.3b at vocabulary {v:,}: N = {gemm_params(s, v):,}, attention "
                 f"{attention_flops_per_token(s) / 1e9:.2f} GFLOP/token, {flops_per_token(s, v) / 1e9:.2f} GFLOP/token "
                 f"in all." if v else ""), file=out)

    def print_peer_and_memory_targets(self, out):
        """Each arm's tokens/s against the peer's, each MXFP4 arm's peak memory against bf16's, and
        bf16's model FLOP/s against BF16 cuBLAS, where measured."""
        rows = []
        b = self.f["baseline"]
        for model in SHAPES:
            bf = self.ours(model, "bf16")
            for arm, a in ARMS.items():
                r, p = self.ours(model, arm), self.peer(model, arm)
                if r and p:
                    rows.append((f"{model} {arm}: ours ÷ peer ({a['peer']})", r["tokens_per_s"] / p["tokens_per_s"],
                                 ">=", 1.0))
                mxfp4 = "mxfp4" in a["keys"]["precision"].values()
                if r and bf and mxfp4 and r.get("peak_gib") and bf.get("peak_gib"):
                    rows.append((f"{model} {arm} peak memory ÷ bf16", r["peak_gib"] / bf["peak_gib"], "<=", 1.10))
            want = {"llama-125m": 0.50, "llama-20m": 0.35}.get(model)
            if bf and b and want and self.vocab:
                mfu = bf["tokens_per_s"] * flops_per_token(SHAPES[model], self.vocab) / (b["bf16_tflops"] * 1e12)
                rows.append((f"{model} bf16 model FLOP/s ÷ BF16 cuBLAS 8192³ ({b['bf16_tflops']:.0f} TFLOP/s)", mfu,
                             ">=", want))
        if not rows:
            return
        print("\nPer-arm targets (against the peer, memory against bf16, FLOP/s against cuBLAS), where measured:",
              file=out)
        print("| target | measured | wanted | verdict |", file=out)
        print("|---|---:|---:|---|", file=out)
        for name, value, op, want in rows:
            met = value <= want if op == "<=" else value >= want
            print(f"| {name} | {value:.3f} | {'≤' if op == '<=' else '≥'} {want:.2f} | {'met' if met else 'NOT MET'} |",
                  file=out)


def report(paths, out=sys.stdout):
    calls = load_calls(paths)
    notes = check_same_machine(calls)
    r = Report(calls)
    print("calls:", file=out)
    for c in calls:
        print(f"  call {c['n']}: {c['file']} (from line {c['line']}), {c['gpu'] or 'GPU not recorded'}"
              f"{', host ' + c['host'] if c['host'] else ''}{', started ' + c['started'] if c['started'] else ''}",
              file=out)
    for n in notes:
        print(f"note: {n}", file=out)
    r.print_tables(out)
    r.print_targets(out)
    r.print_peer_and_memory_targets(out)


# ---- before against after (scripts/gpu-ab-bench.sh) --------------------------------------------

def compare(before_path, after_path, out=sys.stdout):
    """Two results files, one per tree, of one device call: each arm's tokens/s in each, after ÷
    before, and each tree's step ÷ its own BF16 step at that model (numerator and denominator from
    one tree). Refused (BadInput) as any report: files of different GPUs or vocabularies."""
    before_calls, after_calls = load_calls([before_path]), load_calls([after_path])
    for n in check_same_machine(before_calls + after_calls):
        print(f"note: {n}", file=out)
    before, after = collect(before_calls)["ours"], collect(after_calls)["ours"]

    def rate(r):
        return float(r["tokens_per_s"]) if usable(r) else None

    def cell(r):
        if r is None:
            return "not run"
        return f"{rate(r):,.0f}" if usable(r) else f"failed (exit {r.get('exit')})"

    def step_ratio(runs, model, arm):  # = bf16 tokens/s ÷ the arm's
        ours, base = rate(runs.get((model, arm))), rate(runs.get((model, "bf16")))
        return f"{base / ours:.3f}×" if ours and base else "–"

    gpu = before_calls[0]["gpu"] or after_calls[0]["gpu"] or "GPU not recorded"
    print(f"before: {before_path}, after: {after_path}; {gpu}", file=out)
    print("| model | arm | before tokens/s | after tokens/s | after ÷ before | step ÷ bf16, before | "
          "step ÷ bf16, after |", file=out)
    print("|---|---|---:|---:|---:|---:|---:|", file=out)
    for model, arm in sorted(set(before) | set(after)):
        b, a = before.get((model, arm)), after.get((model, arm))
        rb, ra = rate(b), rate(a)
        change = f"{ra / rb:.3f}× ({100 * (ra / rb - 1):+.1f} %)" if rb and ra else "–"
        print(f"| {model} | {arm} | {cell(b)} | {cell(a)} | {change} | {step_ratio(before, model, arm)} | "
              f"{step_ratio(after, model, arm)} |", file=out)


def main(argv):
    if argv[:1] == ["--compare"]:
        if len(argv) != 3 or any(a.startswith("-") for a in argv[1:]):
            print("usage: speed-report.py --compare BEFORE AFTER  (the two trees' results files)", file=sys.stderr)
            return 2
        try:
            compare(argv[1], argv[2])
        except BadInput as e:
            print(f"speed-report: {e}", file=sys.stderr)
            return 2
        return 0
    if argv[:1] == ["--ours-line"]:
        if len(argv) != 5:
            print("usage: speed-report.py --ours-line RUN_DIR MODEL ARM EXIT_CODE", file=sys.stderr)
            return 2
        _, run_dir, model, arm, rc = argv
        try:
            known_arm(arm)
        except UnknownArm as e:
            print(f"speed-report: --ours-line: {e}", file=sys.stderr)
            return 2
        if model not in ARCH or not rc.lstrip("-").isdigit():
            print(f"speed-report: --ours-line: unknown model '{model}' or exit code '{rc}' not an integer",
                  file=sys.stderr)
            return 2
        print(json.dumps(ours_line(run_dir, model, arm, int(rc))))
        return 0
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: speed-report.py RESULTS [RESULTS…]  (results.jsonl files or directories holding one)",
              file=sys.stderr)
        return 2
    try:
        report(argv)
    except BadInput as e:
        print(f"speed-report: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
