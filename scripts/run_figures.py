#!/usr/bin/env python3
"""What the GPU scripts read from a run directory the trainer wrote (config.json, events.jsonl,
output.txt), one function per figure, so that every script reads each figure the same way: the
speed benchmark's results lines (speed-report.py --ours-line), the checks' summaries and
comparisons (gpu-trainer-lib.sh, gpu-train-check.sh, gpu-scale-check.sh, gpu-shard-check.sh).

These runs are started by the scripts, not by `mxablate run`, so no results database holds them
and `mxablate query` cannot answer for them: the CLI has no command that reads a run directory
outside a sweep. Once one ingests such a directory into a store (its train_steps, events and
runs rows hold every figure here), these functions are the one place to switch.

Usage (for bash):
  run_figures.py summary RUN_DIR     one line: the median tokens/s after warm-up, run_end's
                                     tokens/s, peak GPU memory
  run_figures.py recompute RUN_DIR   what run_start says the run recomputed
Plain python 3: no torch.
"""
import json
import os
import statistics
import sys

# Train events before a rate is taken: the first steps allocate, tune and (graphed runs) capture.
WARM_STEPS = 3


def events(run_dir):
    """The run's events, the complete lines of events.jsonl (a line cut short by a killed writer
    is skipped); [] when there is no log."""
    out = []
    try:
        with open(os.path.join(run_dir, "events.jsonl"), encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n") or not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def config(run_dir):
    """The run's config.json; {} when it cannot be read."""
    try:
        with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
            c = json.load(f)
        return c if isinstance(c, dict) else {}
    except (OSError, ValueError):
        return {}


def last_output_line(run_dir):
    """The last non-empty line of output.txt (the trainer's or the config writer's last word)."""
    try:
        with open(os.path.join(run_dir, "output.txt"), encoding="utf-8", errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
    except OSError:
        return "no output.txt"
    return lines[-1] if lines else "no output"


def _last(ev, kind):
    found = [e for e in ev if e.get("kind") == kind]
    return found[-1] if found else None


def run_start(ev):
    """The last run_start event, or None."""
    return _last(ev, "run_start")


def run_end(ev):
    """The last run_end event, or None."""
    return _last(ev, "run_end")


def train_losses(ev):
    """{step: training loss} of the train events."""
    return {e["step"]: e["loss"] for e in ev if e.get("kind") == "train" and "loss" in e}


def step_rates(ev, warm_steps=WARM_STEPS):
    """The tokens/s of the train events after the first `warm_steps` steps."""
    return [e["tokens_per_s"] for e in ev
            if e.get("kind") == "train" and e.get("step", 0) > warm_steps and e.get("tokens_per_s")]


def median_tokens_per_s(ev, warm_steps=WARM_STEPS):
    """The median of `step_rates`, or None without any."""
    rates = step_rates(ev, warm_steps)
    return statistics.median(rates) if rates else None


def val_losses(ev):
    """[(step, validation loss)] of the eval events, in order."""
    return [(e["step"], e["val_loss"]) for e in ev if e.get("kind") == "eval"]


def divergences(ev):
    """The number of divergence events."""
    return sum(1 for e in ev if e.get("kind") == "divergence")


def peak_gpu_gib(ev):
    """run_end's peak GPU memory in GiB, or None."""
    end = run_end(ev)
    return end["peak_gpu_bytes"] / 2 ** 30 if end and end.get("peak_gpu_bytes") else None


def recompute_reason(ev):
    """What run_start says the run recomputed (train.activation_checkpointing resolved), or '?'."""
    start = run_start(ev)
    recompute = start.get("recompute") if start else None
    return recompute.get("reason", "?") if isinstance(recompute, dict) else "?"


def summary(run_dir):
    """'NAME: 12,345 tokens/s | 12,000 | peak GPU 3.1 GiB', or 'NAME: no events'."""
    name = os.path.basename(run_dir.rstrip("/"))
    ev = events(run_dir)
    end = run_end(ev)
    if not end:
        return f"{name}: no events" if not ev else f"{name}: no run_end ({last_output_line(run_dir)})"
    peak = peak_gpu_gib(ev)
    return (f"{name}: {median_tokens_per_s(ev) or 0:,.0f} tokens/s | {end.get('tokens_per_s') or 0:,.0f} | "
            f"peak GPU {'–' if peak is None else f'{peak:.1f}'} GiB")


def main(argv):
    if len(argv) == 2 and argv[0] == "summary":
        print(summary(argv[1]))
    elif len(argv) == 2 and argv[0] == "recompute":
        print(recompute_reason(events(argv[1])))
    else:
        print("usage: run_figures.py summary RUN_DIR | recompute RUN_DIR", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
