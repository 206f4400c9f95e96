#!/usr/bin/env python3
"""What the GPU scripts read from a run directory the trainer wrote (config.json, events.jsonl,
output.txt), one function per figure, so that every script reads each figure the same way: the
speed benchmark's results lines (speed-report.py --ours-line), the checks' summaries and
comparisons (gpu-trainer-lib.sh, gpu-train-check.sh, gpu-scale-check.sh, gpu-shard-check.sh).

These runs are started by the scripts, not by `mxablate run`. `load` stores the directory in a
results database of its own (a temporary one) with `mxablate ingest`, the sweep's ingestion, and
reads the run back with `mxablate query --json`: its train_steps, evals and events rows and its
runs row. The figures here are therefore the ones `mxablate query` gives for the run, from the
log's surviving timeline (a resumed run's lost steps are not counted), and a log the event
contract refuses (a bad line) is refused here too (RunFiguresError, the ingest's one line). The
binary is $MXABLATE (gpu-trainer-lib.sh's build_trainer exports it), else build/bin/mxablate of
this tree; `--mxablate PATH` before the subcommand names another.

Usage (for bash):
  run_figures.py [--mxablate PATH] summary RUN_DIR     one line: the median tokens/s after
                                     warm-up, run_end's tokens/s, peak GPU memory
  run_figures.py [--mxablate PATH] recompute RUN_DIR   what run_start says the run recomputed
Plain python 3: no torch.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

# Train events before a rate is taken: the first steps allocate, tune and (graphed runs) capture.
WARM_STEPS = 3

# The sweep the runs are stored under in load's database.
SWEEP = "run-figures"


class RunFiguresError(Exception):
    """A run directory that could not be read into the store (mxablate's one line)."""


def mxablate_binary():
    """The mxablate that ingests and queries: $MXABLATE, else this tree's build/bin/mxablate."""
    path = os.environ.get("MXABLATE") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "bin", "mxablate")
    if not os.access(path, os.X_OK):
        raise RunFiguresError(f"{path}: no mxablate binary there (set MXABLATE or --mxablate to one)")
    return path


def _mxablate(args):
    try:
        out = subprocess.run([mxablate_binary(), *args], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise RunFiguresError(f"mxablate {args[0]}: {e}")
    if out.returncode != 0:
        lines = [l for l in out.stderr.splitlines() if l.strip()]
        raise RunFiguresError(lines[-1] if lines else f"mxablate {args[0]} exited {out.returncode}")
    return out.stdout


# Everything the functions below read, in one statement over the one run of load's database.
_QUERY = """
SELECT r.run_id, r.arm, r.status, r.trainer_status, r.tokens_per_s, r.peak_gpu_bytes, r.last_seq,
  (SELECT json_group_array(json_array(seq, step, loss, tokens_per_s))
     FROM train_steps t WHERE t.run_id = r.run_id) AS train,
  (SELECT json_group_array(json_array(seq, step, val_loss))
     FROM evals e WHERE e.run_id = r.run_id) AS evals,
  (SELECT json_group_array(json_object('seq', seq, 'kind', kind, 'step', step, 'tokens', tokens,
                                       'detail', json(detail)))
     FROM events e WHERE e.run_id = r.run_id AND kind IN ('run_start', 'run_end', 'divergence'))
     AS events
  FROM runs r
"""


class Run:
    """What the store holds of one run directory: `rows` is its runs row (status, tokens_per_s,
    peak_gpu_bytes, …), `train` its train_steps (step, loss, tokens_per_s), `evals` its
    (step, val_loss), `events` its run_start, run_end and divergence events (each event's fields
    as the trainer wrote them, kind, step and tokens included), all in log order."""

    def __init__(self, row=None):
        row = row or {}
        self.row = row
        self.train = [dict(step=s, loss=l, tokens_per_s=t)
                      for _, s, l, t in sorted(json.loads(row.get("train") or "[]"))]
        self.evals = [(s, v) for _, s, v in sorted(json.loads(row.get("evals") or "[]"))]
        self.events = []
        for e in sorted(json.loads(row.get("events") or "[]"), key=lambda e: e["seq"]):
            detail = e["detail"] if isinstance(e.get("detail"), dict) else {}
            self.events.append({**detail, "kind": e["kind"], "step": e["step"], "tokens": e["tokens"]})

    def has_events(self):
        return bool(self.row.get("last_seq"))


def load(run_dir):
    """The run in run_dir as the results store holds it once `mxablate ingest` has stored it; a
    Run without events when there is no events.jsonl (the trainer never started). Raises
    RunFiguresError with mxablate's line where the directory is refused (a bad config.json or
    event line)."""
    if not os.path.isfile(os.path.join(run_dir, "events.jsonl")):
        return Run()
    tmp = tempfile.mkdtemp(prefix="run-figures-")
    try:
        db = os.path.join(tmp, "runs.db")
        _mxablate(["ingest", "--db", db, "--sweep", SWEEP, run_dir])
        try:
            rows = json.loads(_mxablate(["query", "--db", db, "--json", _QUERY]))
        except ValueError as e:
            raise RunFiguresError(f"mxablate query --json: not JSON ({e})")
        if len(rows) != 1:
            raise RunFiguresError(f"{run_dir}: {len(rows)} runs in its database, not 1")
        return Run(rows[0])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def _last(run, kind):
    found = [e for e in run.events if e.get("kind") == kind]
    return found[-1] if found else None


def run_start(run):
    """The last run_start event, or None."""
    return _last(run, "run_start")


def run_end(run):
    """The last run_end event, or None."""
    return _last(run, "run_end")


def train_losses(run):
    """{step: training loss} of the train events."""
    return {t["step"]: t["loss"] for t in run.train}


def step_rates(run, warm_steps=WARM_STEPS):
    """The tokens/s of the train events after the first `warm_steps` steps."""
    return [t["tokens_per_s"] for t in run.train if (t["step"] or 0) > warm_steps and t["tokens_per_s"]]


def median_tokens_per_s(run, warm_steps=WARM_STEPS):
    """The median of `step_rates`, or None without any."""
    rates = step_rates(run, warm_steps)
    return statistics.median(rates) if rates else None


def val_losses(run):
    """[(step, validation loss)] of the eval events, in order."""
    return list(run.evals)


def divergences(run):
    """The number of divergence events."""
    return sum(1 for e in run.events if e.get("kind") == "divergence")


def peak_gpu_gib(run):
    """The run's peak GPU memory in GiB (runs.peak_gpu_bytes, from run_end), or None."""
    peak = run.row.get("peak_gpu_bytes")
    return peak / 2 ** 30 if peak else None


def recompute_of(run):
    """run_start's recompute as {"blocks", "of", "selective"} (what the run recomputed), or None."""
    start = run_start(run)
    recompute = start.get("recompute") if start else None
    if not isinstance(recompute, dict) or not all(k in recompute for k in ("blocks", "of", "selective")):
        return None
    return {k: recompute[k] for k in ("blocks", "of", "selective")}


def recompute_reason(run):
    """What run_start says the run recomputed (train.activation_checkpointing resolved), or '?'."""
    start = run_start(run)
    recompute = start.get("recompute") if start else None
    return recompute.get("reason", "?") if isinstance(recompute, dict) else "?"


def summary(run_dir):
    """'NAME: 12,345 tokens/s | 12,000 | peak GPU 3.1 GiB', or 'NAME: no events'."""
    name = os.path.basename(run_dir.rstrip("/"))
    try:
        run = load(run_dir)
    except RunFiguresError as e:
        return f"{name}: not read: {e}"
    if not run.row.get("trainer_status"):
        return f"{name}: no events" if not run.has_events() else f"{name}: no run_end ({last_output_line(run_dir)})"
    peak = peak_gpu_gib(run)
    return (f"{name}: {median_tokens_per_s(run) or 0:,.0f} tokens/s | {run.row.get('tokens_per_s') or 0:,.0f} | "
            f"peak GPU {'–' if peak is None else f'{peak:.1f}'} GiB")


def main(argv):
    if len(argv) >= 2 and argv[0] == "--mxablate":
        os.environ["MXABLATE"] = argv[1]
        argv = argv[2:]
    if len(argv) == 2 and argv[0] == "summary":
        print(summary(argv[1]))
    elif len(argv) == 2 and argv[0] == "recompute":
        try:
            print(recompute_reason(load(argv[1])))
        except RunFiguresError as e:
            print(f"run_figures: {e}", file=sys.stderr)
            return 2
    else:
        print("usage: run_figures.py [--mxablate PATH] summary RUN_DIR | recompute RUN_DIR", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
