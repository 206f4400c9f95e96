#!/usr/bin/env python3
"""scripts/speed-report.py on synthetic results (fixtures/speed-call*.jsonl and variants written
here): every speed target line with its denominator and verdict, "not measured" where a figure
is missing or a run failed or ran its GEMMs elsewhere than the arm means, the refusal of results
from different GPUs and of lines naming an arm by an old name, bad input (one line, exit 2),
--ours-line on a run directory written here (its config from `mxablate plan --json`, its events read
through `mxablate ingest` and `query`), and the per-arm targets.
Plain python 3: no torch, no GPU.

    speed_report_test.py REPO_ROOT MXABLATE
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
REPORT = os.path.join(REPO, "scripts", "speed-report.py")
FIX = os.path.join(REPO, "tests", "scripts", "fixtures")
CALL1, CALL2 = os.path.join(FIX, "speed-call1.jsonl"), os.path.join(FIX, "speed-call2.jsonl")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import bench_arms  # noqa: E402
from bench_arms import ARMS  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, REPORT, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MXABLATE": MXABLATE})


def target_rows(stdout):
    """{target name: [cells]} of the speed targets' table."""
    part = stdout.split("Speed targets.", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("target",) and not cells[0].startswith("---"):
            rows[cells[0]] = cells
    return rows


class SpeedReport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def write(self, name, lines):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(l) + "\n" for l in lines)
        return path

    def fixture(self, path):
        with open(path, encoding="utf-8") as f:
            return [json.loads(l) for l in f if l.strip()]

    def test_two_calls_same_gpu_every_target(self):
        out = run(CALL1, CALL2)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = target_rows(out.stdout)
        self.assertEqual(len(rows), 11, rows)
        want = {
            # name: (measured, wanted, verdict starts with, denominator contains)
            "llama-1.3b fp8 step ÷ bf16 step":
                ("0.781×", "≤ 0.800×", "met", "our bf16 step at llama-1.3b"),
            "llama-1.3b fp8@quant.fp8_scaling=delayed step ÷ bf16 step":
                ("not measured", "≤ 0.800×", "not measured: no fp8@quant.fp8_scaling=delayed run", "our bf16 step at llama-1.3b"),
            "llama-8b FP8 ÷ BF16, GEMM-only: the 21 GEMMs of one block":
                ("0.700×", "≤ 0.750×", "met", "BF16 torch.mm"),
            "llama-125m fp8 step ÷ bf16 step":
                ("1.250×", "≤ 1.000×", "NOT MET", "our bf16 step at llama-125m"),
            "llama-1.3b FDW+H16 step ÷ bf16 step":
                ("1.250×", "≤ 1.050×", "NOT MET", "our bf16 step at llama-1.3b"),
            "llama-125m FDW+H16 step ÷ bf16 step":
                ("not measured", "≤ 1.150×", "not measured: the FDW+H16 run failed (exit 5)", "llama-125m"),
            "llama-1.3b FDW+H16@quant.gemm_path=fp8 step ÷ bf16 step":
                ("0.800×", "≤ 0.850×", "met", "our bf16 step at llama-1.3b"),
            "llama-1.3b FDW+H16@quant.gemm_path=fp8-where-exact step ÷ bf16 step":
                ("0.800×", "≤ 0.850×", "met", "our bf16 step at llama-1.3b"),
            "llama-125m bf16 tokens/s ÷ the compiled peer's":
                ("not measured", "≥ 1.000×", "not measured: no bf16 peer run", "compiled PyTorch peer"),
            "llama-1.3b bf16 tokens/s ÷ the compiled peer's":
                ("1.250×", "≥ 1.000×", "met", "per-block activation checkpointing"),
            "llama-1.3b bf16 MFU":
                ("43.2 %", "≥ 55.0 %", "NOT MET", "989 TFLOP/s, the dense BF16 peak of the NVIDIA H100 80GB HBM3"),
        }
        for name, (measured, wanted, verdict, den) in want.items():
            self.assertIn(name, rows)
            cells = rows[name]
            self.assertIn(den, cells[1], name)
            self.assertEqual(cells[2], measured, name)
            self.assertEqual(cells[3], wanted, name)
            self.assertTrue(cells[4].startswith(verdict), f"{name}: {cells[4]}")
        self.assertEqual(rows["llama-8b FP8 ÷ BF16, GEMM-only: the 21 GEMMs of one block"][5], "call 2")
        self.assertEqual(rows["llama-1.3b bf16 MFU"][5], "call 1")
        # The per-tensor path's figure comes with the share of its GEMM calls that were exact.
        self.assertEqual(rows["llama-1.3b FDW+H16@quant.gemm_path=fp8-where-exact step ÷ bf16 step"][5],
                         "call 1; 93.8 % of MXFP4 GEMM output tiles from FP8 tensor cores")
        # The MFU formula is stated, with N for the model at the run's vocabulary.
        self.assertIn("MFU = tokens/s × (6·N + 12·layers·d_model·seq) ÷ peak", out.stdout)
        self.assertIn("N = 1,222,639,616", out.stdout)
        self.assertIn("with activation checkpointing per block, as ours", out.stdout)

    def test_the_peer_is_compared_only_where_it_recomputes_what_ours_did(self):
        with open(CALL1, encoding="utf-8") as f:
            lines = [json.loads(l) for l in f if l.strip()]
        name = "llama-1.3b bf16 tokens/s ÷ the compiled peer's"

        def with_1_3b(ours_recompute, peer_checkpoint):
            out = []
            for l in lines:
                l = dict(l)
                if l.get("model") == "llama-1.3b" and l.get("arm") == "bf16":
                    if l["who"] == "ours":
                        l["recompute"] = ours_recompute
                    elif l["who"] == "peer":
                        l["checkpoint"] = peer_checkpoint
                out.append(l)
            return target_rows(run(self.write("call.jsonl", out)).stdout)[name]

        # Neither recomputes: the same work (run_start's recompute, not the bench's config flag).
        cells = with_1_3b({"blocks": 0, "of": 24, "selective": False}, False)
        self.assertEqual(cells[2], "1.250×")
        self.assertIn("no recompute", cells[1])
        # Every block both ways: the same work.
        self.assertEqual(with_1_3b({"blocks": 24, "of": 24, "selective": False}, True)[2], "1.250×")
        # Ours recomputed selectively, or some blocks, the peer every block or none: not compared.
        for ours, peer in (({"blocks": 0, "of": 24, "selective": True}, True),
                           ({"blocks": 8, "of": 24, "selective": True}, False),
                           ({"blocks": 24, "of": 24, "selective": False}, False)):
            cells = with_1_3b(ours, peer)
            self.assertEqual(cells[2], "not measured", (ours, peer))
            self.assertIn("recompute different work", cells[4])

    def test_one_call_leaves_the_rest_not_measured(self):
        out = run(CALL1)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = target_rows(out.stdout)
        for name in ("llama-8b FP8 ÷ BF16, GEMM-only: the 21 GEMMs of one block",
                     "llama-125m fp8 step ÷ bf16 step",
                     "llama-125m FDW+H16 step ÷ bf16 step",
                     "llama-125m bf16 tokens/s ÷ the compiled peer's"):
            self.assertEqual(rows[name][2], "not measured", name)
            self.assertTrue(rows[name][4].startswith("not measured: "), rows[name])
        self.assertIn("no GEMM-shape run", rows["llama-8b FP8 ÷ BF16, GEMM-only: the 21 GEMMs of one block"][4])
        self.assertIn("no fp8 run", rows["llama-125m fp8 step ÷ bf16 step"][4])
        self.assertEqual(rows["llama-1.3b bf16 MFU"][4], "NOT MET")

    def test_a_ratio_across_calls_names_both(self):
        lines = self.fixture(CALL1)
        first = [l for l in lines if not (l.get("who") == "ours" and l.get("arm") == "fp8")]
        second = [lines[0], lines[1]] + [l for l in lines if l.get("who") == "ours" and l.get("arm") == "fp8"]
        out = run(self.write("a.jsonl", first), self.write("b.jsonl", second))
        self.assertEqual(out.returncode, 0, out.stderr)
        row = target_rows(out.stdout)["llama-1.3b fp8 step ÷ bf16 step"]
        self.assertEqual(row[2], "0.781×")
        self.assertEqual(row[5], "calls 1, 2 (different calls)")

    def test_different_gpus_are_refused(self):
        lines = self.fixture(CALL2)
        lines[0] = {**lines[0], "gpu": "NVIDIA H200"}
        other = self.write("h200.jsonl", lines)
        out = run(CALL1, other)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stdout, "")
        self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
        self.assertIn("was measured on NVIDIA H200", out.stderr)
        self.assertIn("on NVIDIA H100 80GB HBM3: figures of different GPUs are not compared", out.stderr)
        # The same two calls appended to one file are refused alike.
        both = self.write("both.jsonl", self.fixture(CALL1) + lines)
        out = run(both)
        self.assertEqual(out.returncode, 2)
        self.assertIn("figures of different GPUs are not compared", out.stderr)

    def test_different_hosts_of_one_gpu_are_noted(self):
        lines = self.fixture(CALL2)
        lines[0] = {**lines[0], "host": "gpu-b"}
        out = run(CALL1, self.write("other-host.jsonl", lines))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("note: the calls ran on 2 different hosts with the same GPU model", out.stdout)

    def test_a_call_without_its_gpu_is_not_combined(self):
        lines = [l for l in self.fixture(CALL2) if l.get("who") not in ("call", "gemm_shapes")]
        out = run(CALL1, self.write("nogpu.jsonl", lines))
        self.assertEqual(out.returncode, 2)
        self.assertIn("does not record its GPU", out.stderr)
        # Alone it is reported; the MFU, needing the GPU's peak, is not measured.
        out = run(self.write("nogpu-alone.jsonl", lines))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("not measured: dense BF16 peak of the GPU not known here", out.stdout)

    def test_different_vocabularies_are_refused(self):
        lines = [{**l, "vocab": 32768} if l.get("who") in ("call", "data") else l for l in self.fixture(CALL2)]
        out = run(CALL1, self.write("v.jsonl", lines))
        self.assertEqual(out.returncode, 2)
        self.assertIn("different vocabularies (4096, 32768)", out.stderr)

    def test_an_old_arm_name_is_refused(self):
        lines = self.fixture(CALL1)
        for i, l in enumerate(lines):
            if l.get("arm") == "FDW+H16":
                lines[i] = {**l, "arm": "mxfp4+h16"}
                at = i + 1
        path = self.write("old.jsonl", lines)
        out = run(path)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stdout, "")
        self.assertEqual(out.stderr.strip().splitlines(),
                         [f"speed-report: {path}:{at}: 'mxfp4+h16' is an old arm name: the arms take the recipes' "
                          f"names, this one is now 'FDW+H16' (known: {', '.join(ARMS)})"])
        out = run("--ours-line", self.tmp, "llama-1.3b", "mxfp4+h16+exact", "0")
        self.assertEqual(out.returncode, 2)
        self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
        self.assertIn("now 'FDW+H16@quant.gemm_path=fp8-where-exact'", out.stderr)

    def test_per_arm_targets(self):
        out = run(CALL1, CALL2)
        part = out.stdout.split("Per-arm targets", 1)[1]
        rows = {l.split("|")[1].strip(): l.split("|")[2].strip() for l in part.splitlines() if l.startswith("| llama")}
        self.assertEqual(rows, {
            "llama-125m bf16 model FLOP/s ÷ BF16 cuBLAS 8192³ (760 TFLOP/s)": "0.497",
            "llama-1.3b bf16: ours ÷ peer (bf16)": "1.250",
            "llama-1.3b FDW+H16 peak memory ÷ bf16": "1.000",
            "llama-1.3b FDW+H16@quant.gemm_path=fp8 peak memory ÷ bf16": "1.044",
            "llama-1.3b FDW+H16@quant.gemm_path=fp8-where-exact peak memory ÷ bf16": "1.044"})
        # The tables print each arm by its name, as the recipes name it.
        self.assertIn("| FDW+H16@quant.gemm_path=fp8 | 62,500 |", out.stdout)

    def test_an_arm_on_the_wrong_gemm_route_is_not_measured(self):
        lines = self.fixture(CALL1)
        for l in lines:
            if l.get("arm") == "FDW+H16@quant.gemm_path=fp8":
                l["gemm_routes"] = {**l["gemm_routes"], "mxfp4": "emulated"}
        out = run(self.write("route.jsonl", lines))
        self.assertEqual(out.returncode, 0, out.stderr)
        row = target_rows(out.stdout)["llama-1.3b FDW+H16@quant.gemm_path=fp8 step ÷ bf16 step"]
        self.assertEqual(row[2], "not measured")
        self.assertIn("run_start says its mxfp4 GEMMs ran emulated, the arm means hopper-fp8", row[4])

    def test_unknown_gpu_has_no_mfu(self):
        lines = [{**l, "gpu": "NVIDIA H100 PCIe"} if l.get("who") == "call" else l for l in self.fixture(CALL1)]
        out = run(self.write("pcie.jsonl", lines))
        self.assertEqual(out.returncode, 0, out.stderr)
        row = target_rows(out.stdout)["llama-1.3b bf16 MFU"]
        self.assertEqual(row[2], "not measured")
        self.assertIn("dense BF16 peak of NVIDIA H100 PCIe not known here", row[4])

    def test_a_directory_is_read_as_its_results_file(self):
        d = os.path.join(self.tmp, "out")
        os.mkdir(d)
        shutil.copy(CALL1, os.path.join(d, "results.jsonl"))
        out = run(d)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("llama-1.3b bf16 MFU", out.stdout)

    def test_bad_input_is_one_line_and_exit_2(self):
        bad = os.path.join(self.tmp, "bad.jsonl")
        with open(CALL1, encoding="utf-8") as f:
            header = f.readline()
        with open(bad, "w", encoding="utf-8") as f:
            f.write(header + "{not json\n")
        for args, text in (([bad], "bad.jsonl:2: not a JSON line"),
                           ([os.path.join(self.tmp, "missing.jsonl")], "missing.jsonl"),
                           ([], "usage: speed-report.py"),
                           (["--bogus"], "usage: speed-report.py"),
                           (["--ours-line", self.tmp, "llama-1.3b", "nosuch", "0"], "unknown arm 'nosuch'")):
            out = run(*args)
            self.assertEqual(out.returncode, 2, (args, out.stdout, out.stderr))
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
            self.assertIn(text, out.stderr)

    def test_ours_line_from_a_run_directory(self):
        d = os.path.join(self.tmp, "ours-llama-1.3b-fp8")
        data = os.path.join(self.tmp, "data")
        os.makedirs(d)
        os.makedirs(data)
        shutil.copy(os.path.join(REPO, "tests/orchestrator/fake-dataset/manifest.json"), data)
        # The config the bench writes (gpu-trainer-lib.sh's `config`): 8 steps of 65,536 tokens.
        keys = bench_arms.run_keys(data, "cuda", "llama-1.3b", 2048, 65536, 16384, 8, 1000, 16384, 0)
        config = bench_arms.write_config(MXABLATE, bench_arms.recipe(
            "fp8", keys, {"train": {"activation_checkpointing": True}}))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
        routes = {"setting": "auto", "fp8": "fp8-tensorwise", "mxfp4": "emulated"}
        events = [{"kind": "run_start", "step": 0, "tokens": 0, "params": 1231128576, "gemm_routes": routes,
                   "device": "cuda:0 NVIDIA H100 80GB HBM3"}]
        # Steps 1-3 are warm-up (slow); the median of steps 4-8 is 60,000.
        for step, tps in enumerate([1000, 2000, 3000, 59000, 60000, 61000, 10000, 90000], 1):
            events.append({"kind": "train", "step": step, "tokens": 65536 * step, "loss": 9.0, "tokens_per_s": tps})
        events.append({"kind": "run_end", "step": 8, "tokens": 8 * 65536, "status": "budget_exhausted",
                       "peak_gpu_bytes": 3 * 2 ** 30})
        with open(os.path.join(d, "events.jsonl"), "w") as f:
            f.writelines(json.dumps({"seq": i, "time": 1.7e9 + i, **e}) + "\n" for i, e in enumerate(events, 1))
            f.write('{"seq": 11, "time": 1.8e9, "kind": "train", "step": 9, "tokens_per')  # cut short: ignored
        with open(os.path.join(d, "output.txt"), "w") as f:
            f.write("mxablate-train: done\n")
        out = run("--ours-line", d, "llama-1.3b", "fp8", "0")
        self.assertEqual(out.returncode, 0, out.stderr)
        line = json.loads(out.stdout)
        self.assertEqual((line["who"], line["model"], line["arm"], line["exit"]), ("ours", "llama-1.3b", "fp8", 0))
        self.assertEqual(line["tokens_per_s"], 60000)
        self.assertEqual(line["samples"], 5)
        self.assertAlmostEqual(line["ms_per_step"], 1e3 * 65536 / 60000)
        self.assertEqual(line["peak_gib"], 3.0)
        self.assertEqual(line["gemm_routes"], routes)
        self.assertTrue(line["checkpoint"])
        self.assertNotIn("error", line)
        # A failed run: its exit code and the last line of its output, no rate.
        os.remove(os.path.join(d, "events.jsonl"))
        with open(os.path.join(d, "output.txt"), "a") as f:
            f.write("mxablate-train: out of GPU memory: tried to allocate 2 GiB\n")
        line = json.loads(run("--ours-line", d, "llama-1.3b", "fp8", "5").stdout)
        self.assertEqual(line["exit"], 5)
        self.assertNotIn("tokens_per_s", line)
        self.assertEqual(line["error"], "mxablate-train: out of GPU memory: tried to allocate 2 GiB")
        # And the report reads such lines: the failed run's target is not measured.
        lines = [l for l in self.fixture(CALL1) if not (l.get("who") == "ours" and l.get("arm") == "fp8")] + [line]
        out = run(self.write("failed.jsonl", lines))
        row = target_rows(out.stdout)["llama-1.3b fp8 step ÷ bf16 step"]
        self.assertEqual(row[4], "not measured: the fp8 run failed (exit 5)")
        self.assertIn("failed (exit 5: mxablate-train: out of GPU memory", out.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
