#!/usr/bin/env python3
"""scripts/run_figures.py on a run directory written here (its config.json from `mxablate plan
--json`, its events.jsonl by hand), read through the real `mxablate ingest` and `query`: the
`summary` and `recompute` lines the GPU scripts print and parse, the figures its functions give
the checks, a run without run_end or without a log, and the refusal of a log the event contract
refuses and of a missing binary (one line).
Plain python 3: no torch, no GPU.

    run_figures_test.py REPO_ROOT MXABLATE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
MXABLATE = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(REPO, "build/bin/mxablate"))
SCRIPT = os.path.join(REPO, "scripts", "run_figures.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import run_figures  # noqa: E402

RECIPE = """name: figures
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 6144}
  eval: {every_tokens: 3072, tokens: 1024}
arms:
  B: {precision: {fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}}
"""
GIB = 2 ** 30
RECOMPUTE = {"blocks": 1, "of": 2, "reason": "auto: 1 of 2 blocks recomputed to fit 3.0 GiB"}
# Steps 1-3 are warm-up; the rates after them are 100, 300, 200: median 200.
RATES = [10.0, 20.0, 30.0, 100.0, 300.0, 200.0]
LOSSES = [8.0, 7.5, 7.0, 6.5, 6.0, 5.5]


def events(end=True, garbage_at=None):
    ev = [{"kind": "run_start", "step": 0, "tokens": 0, "params": 622912, "device": "cpu",
           "recompute": RECOMPUTE}]
    for step, (rate, loss) in enumerate(zip(RATES, LOSSES), 1):
        ev.append({"kind": "train", "step": step, "tokens": 1024 * step, "loss": loss, "lr": 1e-3,
                   "tokens_per_s": rate})
        if step % 3 == 0:
            ev.append({"kind": "eval", "step": step, "tokens": 1024 * step, "val_loss": loss + 0.25})
    ev.append({"kind": "divergence", "step": 5, "tokens": 5120, "reason": "loss_spike", "value": 6.0,
               "severity": "warning"})
    if end:
        ev.append({"kind": "run_end", "step": 6, "tokens": 6144, "status": "budget_exhausted", "wall_s": 3.0,
                   "tokens_per_s": 150.0, "peak_gpu_bytes": 3 * GIB // 2})
    lines = [json.dumps({"seq": i, "time": 1.7e9 + i, **e}) + "\n" for i, e in enumerate(ev, 1)]
    if garbage_at is not None:
        lines.insert(garbage_at, "this is no event\n")
    # A last line cut short by a killed writer is not read.
    return "".join(lines) + '{"seq": 99, "kind": "train", "step": 7, "tok'


class RunFigures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        data = os.path.join(cls.tmp, "data")
        os.makedirs(data)
        shutil.copy(os.path.join(REPO, "tests/orchestrator/fake-dataset/manifest.json"), data)
        recipe = os.path.join(cls.tmp, "recipe.yaml")
        with open(recipe, "w") as f:
            f.write(RECIPE)
        out = subprocess.run([MXABLATE, "plan", recipe, "--json"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "MXABLATE_DEFAULT_DATASET": data})
        assert out.returncode == 0, out.stderr
        cls.config = json.loads(out.stdout)[0]["config"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def run_dir(self, name, log=None, output="mxablate-train: budget_exhausted\n"):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(self.config, f)
        if log is not None:
            with open(os.path.join(d, "events.jsonl"), "w") as f:
                f.write(log)
        with open(os.path.join(d, "output.txt"), "w") as f:
            f.write(output)
        return d

    def figures(self, *args, mxablate=MXABLATE):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "MXABLATE": mxablate})

    def test_summary_and_recompute_lines(self):
        d = self.run_dir("speed-run", events())
        out = self.figures("summary", d)
        self.assertEqual((out.returncode, out.stderr), (0, ""))
        self.assertEqual(out.stdout, "speed-run: 200 tokens/s | 150 | peak GPU 1.5 GiB\n")
        out = self.figures("recompute", d)
        self.assertEqual((out.returncode, out.stdout), (0, RECOMPUTE["reason"] + "\n"), out.stderr)
        # The binary named on the command line instead of $MXABLATE.
        out = self.figures("--mxablate", MXABLATE, "summary", d, mxablate="/nonexistent/mxablate")
        self.assertEqual(out.stdout, "speed-run: 200 tokens/s | 150 | peak GPU 1.5 GiB\n")
        # Read twice, the same figures: the directory is untouched (no database is left in it).
        self.assertEqual(sorted(os.listdir(d)), ["config.json", "events.jsonl", "output.txt"])

    def test_the_functions_read_the_store(self):
        d = self.run_dir("functions", events())
        os.environ["MXABLATE"] = MXABLATE
        run = run_figures.load(d)
        self.assertEqual(run_figures.train_losses(run), dict(zip(range(1, 7), LOSSES)))
        self.assertEqual(run_figures.step_rates(run), [100.0, 300.0, 200.0])
        self.assertEqual(run_figures.median_tokens_per_s(run), 200.0)
        self.assertEqual(run_figures.median_tokens_per_s(run, warm_steps=2), 150.0)  # 30, 100, 300, 200
        self.assertEqual(run_figures.val_losses(run), [(3, 7.25), (6, 5.75)])
        self.assertEqual(run_figures.divergences(run), 1)
        self.assertEqual(run_figures.peak_gpu_gib(run), 1.5)
        end = run_figures.run_end(run)
        self.assertEqual((end["status"], end["tokens_per_s"], end["step"]), ("budget_exhausted", 150.0, 6))
        self.assertEqual(run_figures.run_start(run)["params"], 622912)
        self.assertEqual(run_figures.recompute_reason(run), RECOMPUTE["reason"])
        self.assertEqual((run.row["status"], run.row["arm"], run.row["run_id"]),
                         ("budget_exhausted", "B", self.config["run_id"]))

    def test_a_run_without_run_end_or_without_a_log(self):
        d = self.run_dir("killed", events(end=False), output="step 6\nKilled\n")
        self.assertEqual(self.figures("summary", d).stdout, "killed: no run_end (Killed)\n")
        d = self.run_dir("never-started", None, output="mxablate-train: config.json: bad\n")
        self.assertEqual(self.figures("summary", d).stdout, "never-started: no events\n")
        self.assertEqual(self.figures("recompute", d).stdout, "?\n")

    def test_a_log_the_contract_refuses_is_one_line(self):
        d = self.run_dir("garbage", events(garbage_at=3))
        log = os.path.join(os.path.realpath(d), "events.jsonl")
        out = self.figures("summary", d)
        self.assertEqual(out.returncode, 0)
        self.assertEqual(len(out.stdout.splitlines()), 1, out.stdout)
        self.assertTrue(out.stdout.startswith(f"garbage: not read: mxablate: {log}: line 4: "), out.stdout)
        out = self.figures("recompute", d)
        self.assertEqual((out.returncode, out.stdout), (2, ""))
        self.assertEqual(len(out.stderr.splitlines()), 1, out.stderr)
        self.assertTrue(out.stderr.startswith(f"run_figures: mxablate: {log}: line 4: "), out.stderr)

    def test_no_binary_is_one_line(self):
        d = self.run_dir("no-binary", events())
        out = self.figures("summary", d, mxablate=os.path.join(self.tmp, "nope"))
        self.assertEqual(out.stdout, f"no-binary: not read: {self.tmp}/nope: no mxablate binary there "
                                     "(set MXABLATE or --mxablate to one)\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
