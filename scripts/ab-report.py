#!/usr/bin/env python3
"""Before against after: two results files of scripts/gpu-speed-bench.sh, one per tree, measured
in one device call on one GPU (scripts/gpu-ab-bench.sh writes them), as one table.

Usage: ab-report.py BEFORE.jsonl AFTER.jsonl

For each model and arm run in either tree: tokens/s before and after, after ÷ before, and each
tree's step ÷ its own BF16 step at that model (the issue-20 ratios, whose numerator and
denominator come from the same tree). A run that failed says its exit code; one run in only one
tree says "not run". Files from different GPUs, or a file whose runs name more than one GPU, are
refused: a ratio comes from one machine. Bad input is one line on stderr and exit 2.

Plain python (no torch): its test runs on machines without it.
"""
import json
import sys


class BadInput(Exception):
    pass


def read(path):
    """(gpu, {(model, arm): line}) of one results file; the last line of a (model, arm) wins."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read ({e.__class__.__name__})")
    gpus, runs = set(), {}
    for n, text in enumerate(raw.splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except ValueError:
            raise BadInput(f"{path}: line {n} is not JSON")
        if not isinstance(line, dict):
            raise BadInput(f"{path}: line {n} is not a JSON object")
        if line.get("who") == "call":
            gpu = line.get("gpu")
            if not isinstance(gpu, str) or not gpu:
                raise BadInput(f"{path}: line {n}: a call line without its GPU")
            gpus.add(gpu)
        elif line.get("who") == "ours":
            model, arm = line.get("model"), line.get("arm")
            if not isinstance(model, str) or not isinstance(arm, str):
                raise BadInput(f"{path}: line {n}: a run without its model and arm")
            runs[(model, arm)] = line
    if not gpus:
        raise BadInput(f"{path}: no call line (not a gpu-speed-bench results file)")
    if len(gpus) > 1:
        raise BadInput(f"{path}: runs on {len(gpus)} GPUs ({', '.join(sorted(gpus))}); one file, one GPU")
    return gpus.pop(), runs


def rate(line):
    if line is None:
        return None
    tps = line.get("tokens_per_s")
    if line.get("exit", 0) != 0 or not isinstance(tps, (int, float)) or tps <= 0:
        return None
    return float(tps)


def cell(line):
    if line is None:
        return "not run"
    r = rate(line)
    return f"{r:,.0f}" if r is not None else f"failed (exit {line.get('exit')})"


def step_ratio(runs, model, arm):
    """This tree's step ÷ its BF16 step at the model (= BF16 tokens/s ÷ the arm's)."""
    ours, base = rate(runs.get((model, arm))), rate(runs.get((model, "bf16")))
    return f"{base / ours:.3f}×" if ours and base else "–"


def report(before_path, after_path):
    gpu_b, before = read(before_path)
    gpu_a, after = read(after_path)
    if gpu_b != gpu_a:
        raise BadInput(f"the trees ran on different GPUs ({gpu_b} and {gpu_a}); a ratio comes from one machine")
    keys = sorted(set(before) | set(after))
    out = [f"before: {before_path}, after: {after_path}; {gpu_b}",
           "| model | arm | before tokens/s | after tokens/s | after ÷ before | step ÷ BF16, before | step ÷ BF16, after |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for model, arm in keys:
        b, a = before.get((model, arm)), after.get((model, arm))
        rb, ra = rate(b), rate(a)
        change = f"{ra / rb:.3f}× ({100 * (ra / rb - 1):+.1f} %)" if rb and ra else "–"
        out.append(f"| {model} | {arm} | {cell(b)} | {cell(a)} | {change} | {step_ratio(before, model, arm)} | "
                   f"{step_ratio(after, model, arm)} |")
    return "\n".join(out)


def main(argv):
    if len(argv) != 2:
        print("usage: ab-report.py BEFORE.jsonl AFTER.jsonl", file=sys.stderr)
        return 2
    try:
        print(report(argv[0], argv[1]))
    except BadInput as e:
        print(f"ab-report: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
