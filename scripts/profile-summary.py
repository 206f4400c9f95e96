#!/usr/bin/env python3
"""Summarize a Kineto trace from `mxablate-train --profile-steps A:B --profile-trace FILE`.

Prints where the GPU time of the profiled steps went: wall time of the window, time the GPU was
busy (union of kernel/copy intervals) and idle, GPU time per category (GEMM, attention, our
quantizers, fused ops, elementwise, reductions, optimizer, copies, NCCL) and the top kernels.
Where the trainer names its host phases (user annotations `mxablate::…`: batches, passes,
clip, read, agree, optimizer, records, evaluation, checkpoint), the GPU's idle time is also
split by the phase the host was in meanwhile (the innermost one; "(between phases)" elsewhere):
what a step's glue costs the GPU, and where. With --skip-steps K the window starts at the
(K+1)-th step the trainer marks (`mxablate::step`): the first step after the profiler starts
carries its start-up (about 2 ms on an H200, in the step's first op), which is no step's cost.
With --by-launch, the kernels whose name matches REGEX are also grouped by launch shape (grid,
block, shared memory: for our quantizer and fused ops the grid is the tensor's shape in tiles),
with each group's launches per step, mean and median duration: what one launch of a kernel at
one shape costs in the step, to set beside the same kernel timed alone (mxablate-bench).
Usage: profile-summary.py TRACE.json [--steps N] [--skip-steps K] [--top K] [--json] [--by-launch REGEX]
A trace may be gzip-compressed (TRACE.json.gz). Only the standard library; runs on either machine.
"""
import argparse
import gzip
import json
import re
import sys

# First match wins; patterns are on the kernel's (demangled) name, lower-cased.
CATEGORIES = [
    ("nccl", r"nccl"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("fused ops (ours)", r"mxablate::.*(rmsnorm|swiglu|rope_kernel|cross_entropy|sum_partials)"),
    ("quantize (ours)", r"mxablate::kernels|quantize|mx_to_fp8|amax"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("gemm", r"gemm|cutlass|xmma|nvjet|sm90_|sm80_|cublas|scaled_mm|wgmma"),
    ("softmax / loss", r"softmax|nll_loss|cross_entropy|log_softmax"),
    ("reduction", r"reduce_kernel|reduce|norm_kernel|sum_kernel"),
    ("copy / cast", r"copy|cast|memcpy|memset|fill"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise"),
]


def category(name):
    low = name.lower()
    for cat, pattern in CATEGORIES:
        if re.search(pattern, low):
            return cat
    return "other"


def union_length(intervals):
    total, end = 0.0, None
    start_run = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start_run
            start_run, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start_run
    return total


def gaps(intervals, start, end):
    """The stretches of [start, end] that no interval covers, in order."""
    out, at = [], start
    for s, e in sorted(intervals):
        if s > at:
            out.append((at, min(s, end)))
        at = max(at, e)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return [(s, e) for s, e in out if e > s]


def idle_by_phase(idle, phases):
    """{phase: µs} of the idle stretches, each instant given to the innermost (latest-starting)
    host phase around it; "(between phases)" where none is."""
    phases = sorted(phases)
    out = {}
    for gs, ge in idle:
        cuts = {gs, ge}
        for s, e, _ in phases:
            if s < ge and e > gs:
                cuts.update(c for c in (s, e) if gs < c < ge)
        cuts = sorted(cuts)
        for a, b in zip(cuts, cuts[1:]):
            mid = (a + b) / 2
            around = [(s, name) for s, e, name in phases if s <= mid < e]
            name = max(around)[1] if around else "(between phases)"
            out[name] = out.get(name, 0.0) + (b - a)
    return out


def short(name, width=90):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[: width - 1] + "…"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1, help="optimizer steps in the window (per-step figures)")
    ap.add_argument("--skip-steps", type=int, default=0,
                    help="start the window at the trainer's (K+1)-th marked step (mxablate::step)")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    ap.add_argument("--by-launch", metavar="REGEX",
                    help="also group the kernels whose name matches REGEX by grid, block and shared memory")
    args = ap.parse_args()
    try:
        match = re.compile(args.by_launch) if args.by_launch is not None else None
    except re.error as e:
        sys.exit(f"profile-summary: --by-launch: not a regular expression ({e})")
    try:
        opener = gzip.open if args.trace.endswith(".gz") else open
        with opener(args.trace, "rt") as f:
            trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        if not isinstance(events, list):
            raise TypeError("traceEvents is not a list")
    except (OSError, EOFError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"profile-summary: {args.trace}: not a Kineto trace ({e})")

    gpu, cpu_ops, launches, shaped, phases = [], [], [], [], []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            ts, dur = float(e["ts"]), float(e.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            continue
        cat = str(e.get("cat", "")).lower()
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu.append((ts, ts + dur, str(e.get("name", "?"))))
            if match is not None and cat == "kernel" and match.search(gpu[-1][2]):
                shaped.append((ts, gpu[-1][2], launch_shape(e.get("args")), dur))
        elif cat == "cpu_op":
            cpu_ops.append((ts, ts + dur))
        elif cat == "user_annotation" and str(e.get("name", "")).startswith("mxablate::"):
            phases.append((ts, ts + dur, str(e["name"])[len("mxablate::"):]))
        elif cat == "cuda_runtime" and "launch" in str(e.get("name", "")).lower():
            launches.append(ts)
    if args.skip_steps < 0:
        sys.exit("profile-summary: --skip-steps must be 0 or more")
    if args.skip_steps:
        marks = sorted(s for s, _, name in phases if name == "step")
        if len(marks) <= args.skip_steps:
            sys.exit(f"profile-summary: {args.trace}: --skip-steps {args.skip_steps}, but the trace marks "
                     f"{len(marks)} step(s) (a trainer without step marks?)")
        begin = marks[args.skip_steps]
        gpu = [(max(s, begin), e, n) for s, e, n in gpu if e > begin]
        shaped = [x for x in shaped if x[0] >= begin]
        launches = [t for t in launches if t >= begin]
        cpu_ops = [(max(s, begin), e) for s, e in cpu_ops if e > begin]
        phases = [(max(s, begin), e, n) for s, e, n in phases if e > begin]
    if not gpu:
        sys.exit(f"profile-summary: {args.trace}: no GPU kernels in the trace (a CPU run?)")
    start = min([s for s, _, _ in gpu] + [s for s, _ in cpu_ops])
    end = max([e for _, e, _ in gpu] + [e for _, e in cpu_ops])
    wall = end - start
    busy = union_length([(s, e) for s, e, _ in gpu])
    kernel_sum = sum(e - s for s, e, _ in gpu)
    by_cat, by_name = {}, {}
    for s, e, name in gpu:
        c = category(name)
        by_cat[c] = by_cat.get(c, 0.0) + (e - s)
        t, n = by_name.get(name, (0.0, 0))
        by_name[name] = (t + (e - s), n + 1)
    steps = max(args.steps, 1)
    summary = {
        "window_ms": wall / 1e3, "steps": steps, "ms_per_step": wall / 1e3 / steps,
        "gpu_busy_ms": busy / 1e3, "gpu_busy_fraction": busy / wall if wall else 0.0,
        "kernels": len(gpu), "kernels_per_step": len(gpu) / steps, "launch_calls": len(launches),
        "categories": {c: t / 1e3 for c, t in sorted(by_cat.items(), key=lambda kv: -kv[1])},
        "top": [{"name": n, "ms": t / 1e3, "count": k} for n, (t, k) in
                sorted(by_name.items(), key=lambda kv: -kv[1][0])[: args.top]],
    }
    if match is not None:
        summary["by_launch"] = by_launch([x[1:] for x in shaped], steps)
    if phases:
        by_phase = idle_by_phase(gaps([(s, e) for s, e, _ in gpu], start, end), phases)
        summary["idle_by_host_phase"] = {p: t / 1e3 / steps for p, t in sorted(by_phase.items(), key=lambda kv: -kv[1])}
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"window {wall / 1e3:.1f} ms over {steps} step(s): {wall / 1e3 / steps:.2f} ms/step; "
          f"GPU busy {busy / 1e3:.1f} ms ({100 * busy / wall:.1f} %), idle {100 * (1 - busy / wall):.1f} %; "
          f"{len(gpu) / steps:.0f} kernels/step, mean {kernel_sum / len(gpu):.1f} µs")
    print()
    print("| category | ms/step | % of GPU time |")
    print("|---|---:|---:|")
    for c, t in sorted(by_cat.items(), key=lambda kv: -kv[1]):
        print(f"| {c} | {t / 1e3 / steps:.2f} | {100 * t / kernel_sum:.1f} % |")
    print()
    print("| kernel | ms/step | launches/step | category |")
    print("|---|---:|---:|---|")
    for n, (t, k) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"| `{short(n).replace('|', '/')}` | {t / 1e3 / steps:.2f} | {k / steps:.0f} | {category(n)} |")
    if phases:
        idle = wall - busy
        print()
        print("GPU idle by the host's phase meanwhile:")
        print()
        print("| host phase | idle ms/step | % of idle |")
        print("|---|---:|---:|")
        for p, t in summary["idle_by_host_phase"].items():
            print(f"| {p} | {t:.3f} | {100 * t * 1e3 * steps / idle if idle else 0:.1f} % |")
    if match is not None:
        print()
        print(f"kernels matching `{args.by_launch}` by launch shape:")
        print()
        print("| kernel | grid | block | shared bytes | ms/step | launches/step | mean µs | median µs |")
        print("|---|---|---|---:|---:|---:|---:|---:|")
        for g in summary["by_launch"]:
            print(f"| `{short(compact(g['name'])).replace('|', '/')}` | {g['grid']} | {g['block']} | {g['shared_bytes']} | "
                  f"{g['ms_per_step']:.2f} | {g['launches_per_step']:.0f} | {g['mean_us']:.1f} | {g['median_us']:.1f} |")
        if not summary["by_launch"]:
            print("| (no kernel matched) | | | | | | | |")


def compact(name):
    """A kernel name without `void ` and our kernels' namespaces, so that a short cell keeps the
    template arguments (input type, format, variant) that tell one of our instances from another."""
    name = re.sub(r"^void\s+", "", name)
    return re.sub(r"mxablate::kernels::(gpu::)?((detail|\(anonymous namespace\))::)?", "", name)


def launch_shape(args):
    """(grid, block, shared memory) of a kernel event as Kineto records them; '?' where absent."""
    args = args if isinstance(args, dict) else {}

    def dims(v):
        return "x".join(str(d) for d in v) if isinstance(v, list) and v else "?"

    shared = args.get("shared memory")
    return dims(args.get("grid")), dims(args.get("block")), shared if isinstance(shared, int) else "?"


def by_launch(shaped, steps):
    """Groups (name, shape, duration µs) by name and shape, most GPU time first."""
    groups = {}
    for name, shape, dur in shaped:
        groups.setdefault((name, shape), []).append(dur)
    out = []
    for (name, (grid, block, shared)), durs in groups.items():
        durs.sort()
        out.append({"name": name, "grid": grid, "block": block, "shared_bytes": shared,
                    "ms_per_step": sum(durs) / 1e3 / steps, "launches_per_step": len(durs) / steps,
                    "mean_us": sum(durs) / len(durs), "median_us": durs[len(durs) // 2]})
    return sorted(out, key=lambda g: -g["ms_per_step"])


if __name__ == "__main__":
    main()
