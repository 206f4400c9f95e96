#!/usr/bin/env python3
"""scripts/profile-summary.py on synthetic Kineto traces: the window, busy and idle time, the
categories and top kernels per step, the idle time split by the host's phases, --by-launch's groups (per name and launch shape, launches per
step, mean and median), gzip-compressed traces, --json; and hostile input (not JSON, not a trace,
events with missing or mistyped fields, a bad regular expression, no kernels) answered with one
line and a non-zero exit, never a stack trace. Plain python 3.

    profile_summary_test.py REPO_ROOT
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
SCRIPT = os.path.join(REPO, "scripts", "profile-summary.py")

QUANT = "void mxablate::kernels::gpu::detail::quantize_kernel<unsigned short, (mxablate::kernels::QuantFormat)4, false, false, false>(mxablate::kernels::gpu::detail::KernelParams)"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"


def kernel(name, ts, dur, grid=None, shared=None):
    args = {"block": [256, 1, 1]}
    if grid is not None:
        args["grid"] = grid
    if shared is not None:
        args["shared memory"] = shared
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": args}


# Two steps: the GPU busy 0-100, 100-150 (a GEMM beside a quantize launch), idle 150-200, then
# three quantize launches at two shapes and a copy.
EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10},
    kernel(GEMM, 0, 100),
    kernel(QUANT, 100, 40, [16, 128, 1], 65952),
    kernel(QUANT, 140, 10, [16, 128, 1], 33184),
    kernel(QUANT, 200, 60, [16, 128, 1], 65952),
    kernel(QUANT, 260, 50, [16, 128, 1], 65952),
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 310, "dur": 90},
]


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class ProfileSummaryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, content, compress=False):
        path = os.path.join(self.dir.name, name)
        data = content if isinstance(content, str) else json.dumps(content)
        with (gzip.open(path, "wt") if compress else open(path, "w")) as f:
            f.write(data)
        return path

    def summary(self, *extra, compress=False, events=EVENTS, steps="2"):
        path = self.write("t.json.gz" if compress else "t.json", {"traceEvents": events}, compress)
        r = run(path, "--steps", steps, "--json", *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_window_busy_and_categories(self):
        s = self.summary()
        self.assertAlmostEqual(s["window_ms"], 0.4)
        self.assertAlmostEqual(s["ms_per_step"], 0.2)
        self.assertAlmostEqual(s["gpu_busy_ms"], 0.35)  # 0-150, 200-400
        self.assertAlmostEqual(s["categories"]["gemm"], 0.1)
        self.assertAlmostEqual(s["categories"]["quantize (ours)"], 0.16)
        self.assertAlmostEqual(s["categories"]["copy / cast"], 0.09)
        self.assertEqual(s["top"][0]["name"], QUANT)
        self.assertEqual(s["top"][0]["count"], 4)
        self.assertNotIn("by_launch", s)

    def test_by_launch_groups_per_shape(self):
        s = self.summary("--by-launch", "quantize_kernel")
        groups = s["by_launch"]
        self.assertEqual(len(groups), 2)
        big, small = groups  # most GPU time first
        self.assertEqual((big["grid"], big["block"], big["shared_bytes"]), ("16x128x1", "256x1x1", 65952))
        self.assertAlmostEqual(big["ms_per_step"], 0.075)  # 150 µs over 2 steps
        self.assertEqual(big["launches_per_step"], 1.5)
        self.assertAlmostEqual(big["mean_us"], 50.0)
        self.assertEqual(big["median_us"], 50)
        self.assertEqual(small["shared_bytes"], 33184)
        self.assertEqual(small["median_us"], 10)
        # The table names our instances without their namespaces, keeping the template arguments.
        path = self.write("t.json", {"traceEvents": EVENTS})
        table = run(path, "--steps", "2", "--by-launch", "quantize").stdout
        self.assertIn("| `quantize_kernel<unsigned short, (QuantFormat)4, false, false, false>(KernelParams)` "
                      "| 16x128x1 | 256x1x1 | 65952 | 0.07 | 2 | 50.0 | 50.0 |", table)
        self.assertIn("(no kernel matched)", run(path, "--by-launch", "no such kernel").stdout)

    def test_idle_split_by_the_host_phase_around_it(self):
        # GPU busy 0-100 and 200-300; the host in `passes` 0-120 (with `read` 105-115 inside
        # it), in `records` 150-180, in no phase 120-150 and 180-200; one step.
        def phase(name, ts, dur):
            return {"ph": "X", "cat": "user_annotation", "name": "mxablate::" + name, "ts": ts, "dur": dur}
        events = [kernel(GEMM, 0, 100), kernel(GEMM, 200, 100), phase("passes", 0, 120),
                  phase("read", 105, 10), phase("records", 150, 30),
                  {"ph": "X", "cat": "user_annotation", "name": "someone_else", "ts": 100, "dur": 100},
                  {"ph": "X", "cat": "user_annotation", "name": "mxablate::bad", "ts": "x", "dur": 5}]
        s = self.summary(events=events, steps="1")
        by = s["idle_by_host_phase"]
        self.assertAlmostEqual(by["read"], 0.010)
        self.assertAlmostEqual(by["passes"], 0.010)  # 100-105 and 115-120
        self.assertAlmostEqual(by["records"], 0.030)
        self.assertAlmostEqual(by["(between phases)"], 0.050)
        self.assertAlmostEqual(sum(by.values()), 0.1)  # every idle instant counted once
        self.assertEqual(set(by), {"read", "passes", "records", "(between phases)"})
        table = run(self.write("p.json", {"traceEvents": events})).stdout
        self.assertIn("| (between phases) | 0.050 | 50.0 % |", table)
        # A trace without our phases has no such split.
        self.assertNotIn("idle_by_host_phase", self.summary())

    def test_skip_steps_starts_the_window_at_a_later_marked_step(self):
        # Two marked steps: the first (0-500) carries a 300 µs stall at its start, the second
        # (500-700) does not. Skipping one leaves the second: 200 µs, 150 busy, 50 idle.
        def mark(name, ts, dur):
            return {"ph": "X", "cat": "user_annotation", "name": "mxablate::" + name, "ts": ts, "dur": dur}
        events = [mark("step", 0, 500), mark("step", 500, 200), mark("passes", 0, 310),
                  kernel(GEMM, 300, 200), kernel(QUANT, 450, 100, [4, 128, 1], 65952),
                  kernel(GEMM, 600, 100), mark("read", 550, 50)]
        whole = self.summary(events=events, steps="2")
        self.assertAlmostEqual(whole["window_ms"], 0.4)  # the GPU's first and last work
        s = self.summary("--skip-steps", "1", "--by-launch", "quantize", events=events, steps="1")
        self.assertAlmostEqual(s["window_ms"], 0.2)
        self.assertAlmostEqual(s["gpu_busy_ms"], 0.15)  # 500-550 (the quantize's rest), 600-700
        self.assertAlmostEqual(s["idle_by_host_phase"]["read"], 0.05)
        self.assertNotIn("passes", s["idle_by_host_phase"])
        self.assertEqual(s["by_launch"], [])  # the quantize launched before the window
        # More steps skipped than marked, or a negative count: one line, an error.
        path = self.write("s.json", {"traceEvents": events})
        for bad in ("2", "-1"):
            r = run(path, "--skip-steps", bad)
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_gzip_trace(self):
        self.assertAlmostEqual(self.summary(compress=True)["gpu_busy_ms"], 0.35)

    def test_fields_missing_or_mistyped_are_skipped_or_unknown(self):
        events = EVENTS + [
            {"ph": "X", "cat": "kernel", "name": QUANT, "ts": "late", "dur": 5},  # no usable time
            {"ph": "X", "cat": "kernel", "name": QUANT, "ts": 400, "dur": 1, "args": "not a mapping"},
            {"ph": "X", "cat": "kernel", "name": QUANT, "ts": 401, "dur": 1, "args": {"grid": "16x128"}},
            "not an event", 7, None,
        ]
        groups = self.summary("--by-launch", "quantize", events=events)["by_launch"]
        unknown = [g for g in groups if g["grid"] == "?"]
        self.assertEqual(len(unknown), 1)
        self.assertEqual(unknown[0]["launches_per_step"], 1.0)
        self.assertEqual((unknown[0]["block"], unknown[0]["shared_bytes"]), ("?", "?"))

    def test_hostile_input_is_one_line_and_an_error(self):
        cases = {
            "not JSON": self.write("a.json", "{not json"),
            "not a trace": self.write("b.json", {"traceEvents": 3}),
            "a number": self.write("c.json", "42"),
            "truncated gzip": self.write("d.json.gz", "x"),
            "no such file": os.path.join(self.dir.name, "missing.json"),
        }
        for what, path in cases.items():
            with self.subTest(what):
                r = run(path)
                self.assertNotEqual(r.returncode, 0)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn("not a Kineto trace", r.stderr)
                self.assertNotIn("Traceback", r.stderr)
        with open(cases["truncated gzip"], "wb") as f:
            f.write(gzip.compress(b'{"traceEvents": [')[:-6])
        r = run(cases["truncated gzip"])
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn("Traceback", r.stderr)
        cpu_only = self.write("e.json", {"traceEvents": [EVENTS[0]]})
        r = run(cpu_only)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no GPU kernels", r.stderr)
        r = run(self.write("f.json", {"traceEvents": EVENTS}), "--by-launch", "(unclosed")
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("--by-launch", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=1)
