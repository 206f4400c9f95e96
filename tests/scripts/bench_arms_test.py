#!/usr/bin/env python3
"""scripts/bench_arms.py, the one table of the speed bench's arms, is consistent with what reads
it: every arm has a unique plain name, means precisions, quant settings and GEMM routes that the
trainer's contract knows (read from its C++ name tables), and a peer implementation that
peer_llama.py has; gpu-trainer-lib.sh's `config` writes exactly the table's settings for every
arm and refuses an unknown one (one line, exit 2); every arm the GPU scripts train is in the
table; gpu-speed-bench.sh, peer_llama.py and speed-report.py take their arms from it; and
llama_shapes.py's architectures are model_presets.cpp's. Plain python 3 and bash: no torch.

    bench_arms_test.py REPO_ROOT
"""
import json
import os
import re
import subprocess
import sys
import unittest

REPO = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
SCRIPTS = os.path.join(REPO, "scripts")
sys.path.insert(0, SCRIPTS)
import bench_arms  # noqa: E402
import llama_shapes  # noqa: E402
from bench_arms import ARMS, PEER_MODES  # noqa: E402


def source(*parts):
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def cpp_names(path, enum):
    """The names of a C++ NameTable<enum, N> ({Enum::kX, "x"} pairs) in a source of the repository."""
    return set(re.findall(rf'\{{{enum}::k\w+, "([\w-]+)"\}}', source(path)))


def trainer_config(arm, extra="{}"):
    """gpu-trainer-lib.sh's `config` for `arm`, as the GPU scripts call it."""
    script = ('source scripts/gpu-trainer-lib.sh; DATA=/data/x; '
              f'config t cuda llama-1.3b "$1" 2048 65536 16384 10 1000 16384 0 "$2"')
    return subprocess.run(["bash", "-c", script, "bash", arm, extra], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PY": sys.executable})


class BenchArms(unittest.TestCase):
    def test_names_are_unique_and_plain(self):
        names = list(ARMS)
        self.assertEqual(len({n.lower() for n in names}), len(names))
        self.assertEqual(len({a["label"] for a in ARMS.values()}), len(names))
        for n in names:
            # Run directories are named after arms, and --arms splits on commas and spaces.
            self.assertRegex(n, r"^[a-z0-9][a-z0-9+]*$")
        self.assertEqual(subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_arms.py"), "names"],
                                        capture_output=True, text=True).stdout.split(), names)

    def test_every_arm_means_settings_the_contract_knows(self):
        precisions = cpp_names("trainer/contract/src/quant_settings.cpp", "GemmPrecision")
        paths = cpp_names("trainer/contract/src/quant_settings.cpp", "GemmPath")
        # The one route table (the kernels' header; contract::GemmRoute is the same type).
        routes = cpp_names("kernels/include/mxablate/kernels/gemm_route.h", "GemmRoute")
        self.assertTrue(precisions >= {"bf16", "fp8", "mxfp4"}, precisions)
        self.assertEqual(paths, {"auto", "emulated", "fp8", "fp8-where-exact"})
        self.assertEqual(routes, {"emulated", "fp8-tensorwise", "hopper-fp8", "mxfp4-as-fp8"})
        for name, a in ARMS.items():
            self.assertIn(a["precision"], precisions, name)
            self.assertLessEqual(set(a["quant"]), {"hadamard", "gemm_path", "fp8_scaling"}, name)
            if "fp8_scaling" in a["quant"]:
                self.assertIn(a["quant"]["fp8_scaling"],
                              cpp_names("trainer/contract/src/quant_settings.cpp", "Fp8Scaling"), name)
            if "gemm_path" in a["quant"]:
                self.assertIn(a["quant"]["gemm_path"], paths, name)
            if "hadamard" in a["quant"]:
                h = a["quant"]["hadamard"]
                self.assertEqual(set(h), {"mode", "size", "gemms"}, name)
                self.assertLessEqual(set(h["gemms"]), {"fprop", "dgrad", "wgrad"}, name)
            for prec, route in a["routes"].items():
                self.assertIn(prec, precisions, name)
                self.assertIn(route, routes, name)
            self.assertIn(a["peer"], PEER_MODES, name)
            # An arm's train keys only say how it runs: execution keys of the contract's table.
            keys = source("trainer/contract/include/mxablate/contract/config_keys.h")
            for key in a.get("train", {}):
                self.assertRegex(keys, rf'\{{"train\.{re.escape(key)}", [^}}]*kExecution', name)
        # The arms the issue names, each once.
        self.assertEqual(ARMS["mxfp4+h16+fp8path"]["quant"].get("gemm_path"), "fp8")
        self.assertEqual(ARMS["mxfp4+h16"]["quant"]["hadamard"],
                         {"mode": "deterministic", "size": 16, "gemms": ["wgrad"]})

    def test_every_peer_mode_is_implemented_by_the_peer(self):
        peer = source("scripts/peer_llama.py")
        self.assertIn("from bench_arms import ARMS", peer)
        self.assertIn("choices=list(ARMS)", peer)
        self.assertIn('ARMS[args.arm]["peer"]', peer)
        for mode in PEER_MODES:
            # bf16 is the plain nn.Linear, fp8 and fdw+h16 their branches; fdw is the MXFP4 default.
            if mode != "fdw":
                self.assertRegex(peer, rf'== "{re.escape(mode)}"', mode)
        self.assertEqual(set(PEER_MODES), {a["peer"] for a in ARMS.values()})
        # The peer runs each implementation once for a list of arms.
        self.assertEqual(bench_arms.peer_runs(list(ARMS)), ["bf16", "fp8", "mxfp4", "mxfp4+h16"])

    def test_trainer_config_is_the_table(self):
        for name, a in ARMS.items():
            out = trainer_config(name)
            self.assertEqual(out.returncode, 0, out.stderr)
            c = json.loads(out.stdout)
            self.assertEqual(c["arm"], name)
            p = a["precision"]
            self.assertEqual(c["precision"], {"fprop": p, "dgrad": p, "wgrad": p})
            self.assertEqual(c.get("quant", {}), a["quant"], name)
            self.assertEqual(c["model"], "llama-1.3b")
            # The arm's train keys join the bench's train section without replacing it.
            for key, value in a.get("train", {}).items():
                self.assertEqual(c["train"][key], value, name)
            self.assertIn("global_batch_tokens", c["train"], name)
        self.assertEqual(ARMS["mxfp4+h16+producers"]["train"], {"fused_producers": True})
        # EXTRA merges over the arm's quant settings instead of replacing them.
        out = trainer_config("mxfp4+h16", '{"quant": {"gemm_path": "emulated"}, "train": {"activation_checkpointing": true}}')
        c = json.loads(out.stdout)
        self.assertEqual(c["quant"], {**ARMS["mxfp4+h16"]["quant"], "gemm_path": "emulated"})
        self.assertTrue(c["train"]["activation_checkpointing"])
        out = trainer_config("mxfp4+h32")
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stdout, "")
        self.assertEqual(out.stderr.strip().splitlines(),
                         ["config: unknown arm 'mxfp4+h32' (known: " + ", ".join(ARMS) + ")"])

    def test_every_arm_the_gpu_scripts_train_is_in_the_table(self):
        used = set()
        for name in os.listdir(SCRIPTS):
            if not name.endswith(".sh"):
                continue
            text = source("scripts", name)
            if "gpu-trainer-lib.sh" not in text or name == "gpu-trainer-lib.sh":
                continue
            for lst in re.findall(r"for prec in ([^;]+); do", text):
                used |= set(lst.split())
            # run NAME DEVICE MODEL ARM …: a literal arm (variables come from the loops above).
            for arm in re.findall(r'\brun "?[\w$.{}+-]+"? (?:cpu|cuda) [\w$.{}-]+ ([\w+.-]+) ', text):
                used.add(arm)
        self.assertTrue(used >= {"bf16", "mxfp4", "mxfp4+h16", "fp8"}, used)
        self.assertLessEqual(used, set(ARMS), used - set(ARMS))
        # The arm lists given to the bench, by the scripts and by the documented commands.
        lists = []
        for path in [os.path.join("scripts", n) for n in os.listdir(SCRIPTS) if n.endswith(".sh")] + \
                ["docs/performance.md"]:
            lists += re.findall(r"--(?:peer-)?arms \"?([a-z0-9+.,-]+)", source(path))
        self.assertIn("bf16,fp8,mxfp4+h16,mxfp4+h16+fp8path", lists)
        for lst in lists:
            if lst != "none":
                bench_arms.parse_list(lst)

    def test_the_bench_and_the_report_take_their_arms_from_the_table(self):
        bench = source("scripts/gpu-speed-bench.sh")
        self.assertIn("bench_arms.py names", bench)
        self.assertIn("bench_arms.py peer-runs", bench)
        self.assertIn("bench_arms.py check", bench)
        self.assertNotRegex(bench, r"ARMS=\((?!\))")  # no arm list of its own
        report = source("scripts/speed-report.py")
        self.assertIn("from bench_arms import ARMS", report)
        self.assertNotIn("PEER_ARM =", report)

    def test_list_parsing(self):
        self.assertEqual(bench_arms.parse_list("bf16, fp8 bf16"), ["bf16", "fp8"])
        for bad in ("", "bf16,nope"):
            with self.assertRaises(bench_arms.UnknownArm):
                bench_arms.parse_list(bad)
        out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_arms.py"), "check", "bf16,fdw"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr.strip().splitlines(), ["bench_arms: unknown arm 'fdw' (known: "
                                                           + ", ".join(ARMS) + ")"])

    def test_shapes_are_the_trainer_presets(self):
        presets = {m: tuple(map(int, g)) for m, *g in re.findall(
            r'\{"(llama-[\w.]+)", (\d+), (\d+), (\d+), (\d+), (\d+),', source("trainer/core/src/model_presets.cpp"))}
        for model, s in llama_shapes.ARCH.items():
            self.assertEqual(presets.get(model), (s["d"], s["layers"], s["heads"], s["kv_heads"], s["ffn"]), model)
        # Llama 3.1 8B at its vocabulary: 8.03 B parameters (model_presets.cpp's note).
        self.assertEqual(round(llama_shapes.all_params(llama_shapes.ARCH["llama-8b"], 128256) / 1e7), 803)
        self.assertEqual([(n, k) for _, n, k in llama_shapes.linears(llama_shapes.ARCH["llama-8b"])],
                         [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096),
                          (4096, 14336)])
        out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "llama_shapes.py"), "bench", "llama-1.3b"],
                             capture_output=True, text=True)
        self.assertEqual(out.stdout.split(), ["llama-1.3b", "2048", "65536", "16384", "10", "1", "3", "8"])
        out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "llama_shapes.py"), "bench", "llama-8b"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(len(out.stderr.strip().splitlines()), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
