#!/usr/bin/env python3
"""scripts/bench_arms.py, the one table of the arms the GPU scripts train, is consistent with the
recipes and with what reads it: every arm is a recipe arm with the recipes' keys (as `mxablate
plan` resolves recipes/extra-tokens-20m.yaml) or a variant RECIPE_ARM@KEY=VALUE of one; a name
the bench had before it took the recipes' names is refused with one line naming its new name;
gpu-trainer-lib.sh's `config` writes every arm's config through `mxablate plan --json` (the
contract's writer) with exactly the arm's keys, and refuses an unknown arm or key (one line, exit
2); no other script builds a config or parses an event log; every arm the GPU scripts and the
documented commands train is in the table; the peer and the report take their arms from it; and
llama_shapes.py's architectures are the trainer's presets. Plain python 3 and bash: no torch.

    bench_arms_test.py REPO_ROOT MXABLATE
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
MXABLATE = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(REPO, "build/bin/mxablate"))
SCRIPTS = os.path.join(REPO, "scripts")
sys.path.insert(0, SCRIPTS)
import bench_arms  # noqa: E402
import llama_shapes  # noqa: E402
from bench_arms import ARMS, NAMES, PEER_MODES, RECIPE_ARMS, RENAMED  # noqa: E402

# A manifest the launch checks accept (vocabulary 4,096, 100 M training tokens); nothing reads shards.
FAKE_MANIFEST = os.path.join(REPO, "tests/orchestrator/fake-dataset/manifest.json")


def source(*parts):
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def find_source(name, under):
    """The one file called `name` under the directory `under` (found by name: files move)."""
    found = [os.path.join(d, name) for d, _, files in os.walk(os.path.join(REPO, under)) if name in files]
    assert len(found) == 1, (name, found)
    with open(found[0], encoding="utf-8") as f:
        return f.read()


def gpu_scripts():
    return sorted(n for n in os.listdir(SCRIPTS) if n.endswith(".sh"))


class Planned:
    """Recipes planned by the real `mxablate plan --json`, against a fake dataset."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "data", "study")  # extra-tokens-20m.yaml's dataset, relative
        os.makedirs(cls.data)
        shutil.copy(FAKE_MANIFEST, cls.data)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def plan(self, recipe):
        out = subprocess.run([MXABLATE, "plan", recipe, "--json"], cwd=self.tmp, capture_output=True, text=True,
                             timeout=60, env={**os.environ, "MXABLATE_DEFAULT_DATASET": self.data})
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def recipe_arms(self, path):
        """{arm: its first run's config} of a recipe."""
        arms = {}
        for r in self.plan(os.path.join(REPO, path)):
            arms.setdefault(r["arm"], r["config"])
        return arms

    def config(self, arm, extra="{}", device="cuda"):
        """gpu-trainer-lib.sh's `config` for `arm`, as the GPU scripts call it."""
        script = ('source scripts/gpu-trainer-lib.sh; DATA="$3"; MXABLATE="$4"; '
                  f'config {device} llama-1.3b "$1" 2048 65536 16384 10 1000 16384 0 "$2"')
        return subprocess.run(["bash", "-c", script, "bash", arm, extra, self.data, MXABLATE], cwd=REPO,
                              capture_output=True, text=True, timeout=60,
                              # carried packages, if the tree has any, unpack there, not into the tree
                              env={**os.environ, "PY": sys.executable,
                                   "MXABLATE_CARRY_PREFIX": os.path.join(self.tmp, "prefix")})


class BenchArms(Planned, unittest.TestCase):
    def test_names_are_unique_and_valid_recipe_arm_names(self):
        names = list(ARMS)
        self.assertEqual(names, list(NAMES))
        self.assertEqual(len({n.lower() for n in names}), len(names))
        for n in names:
            # recipe_loader.cpp's arm names; no commas or spaces, which split --arms lists.
            self.assertRegex(n, r"^[A-Za-z0-9][A-Za-z0-9_.+=@-]{0,63}$")
        self.assertEqual(subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_arms.py"), "names"],
                                        capture_output=True, text=True).stdout.split(), names)

    def test_every_arm_is_a_recipe_arm_or_derives_from_one(self):
        recipes = {path: self.recipe_arms(path)
                   for path in ("recipes/extra-tokens-20m.yaml", "recipes/paper-arms-20m.yaml")}
        recipe_names = set().union(*recipes.values())
        self.assertEqual(recipe_names, {"fp8", "FDW", "FDW+H16", "FD", "FDW+SR", "FDW+RHT16", "F", "bf16"})
        every = recipes["recipes/extra-tokens-20m.yaml"]
        for name in ARMS:
            base, _, setting = name.partition("@")
            self.assertIn(base, RECIPE_ARMS, name)
            self.assertIn(base, recipe_names, name)
            if setting:
                # The name is the definition: the recipe arm's keys with that one key set.
                path, value = setting.split("=")
                keys = bench_arms.keys(name)
                node = keys
                for part in path.split("."):
                    node = node[part]
                self.assertEqual(json.dumps(node) if not isinstance(node, str) else node, value, name)
                self.assertEqual(bench_arms.keys(name), bench_arms.merge(bench_arms.keys(base), bench_arms.split(name)[1]))
        # Each recipe arm means what the recipe means: the same resolved numerics.
        for base in RECIPE_ARMS:
            out = self.config(base)
            self.assertEqual(out.returncode, 0, out.stderr)
            ours, theirs = json.loads(out.stdout), every[base]
            for section in ("precision", "quant", "overrides", "precision_schedule"):
                self.assertEqual(ours.get(section), theirs.get(section), f"{base}: {section}")

    def test_old_names_are_refused_naming_the_new_ones(self):
        bench = os.path.join(SCRIPTS, "bench_arms.py")
        for old, new in RENAMED.items():
            self.assertNotIn(old, ARMS)
            self.assertIn(new, ARMS)
            out = subprocess.run([sys.executable, bench, "check", f"bf16,{old}"], capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, old)
            self.assertEqual(out.stdout, "")
            lines = out.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, out.stderr)
            self.assertIn(f"'{old}' is an old arm name", lines[0])
            self.assertIn(f"now '{new}'", lines[0])
            self.assertIn("known: " + ", ".join(ARMS), lines[0])
            out = self.config(old)
            self.assertEqual(out.returncode, 2, old)
            self.assertEqual(out.stdout, "")
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
        # The peer's implementation names are not arm names either.
        with self.assertRaises(bench_arms.UnknownArm):
            bench_arms.arm("fdw+h16")

    def test_every_arm_means_settings_the_contract_knows(self):
        # The one route table (the kernels' header; contract::GemmRoute is the same type).
        routes = set(re.findall(r'\{GemmRoute::k\w+, "([\w-]+)"\}', find_source("gemm_route.h", "kernels")))
        self.assertEqual(routes, {"emulated", "fp8-tensorwise", "hopper-fp8", "mxfp4-as-fp8"})
        for name, a in ARMS.items():
            for prec, route in a["routes"].items():
                self.assertIn(prec, a["keys"]["precision"].values(), name)
                self.assertIn(route, routes, name)
            self.assertIn(a["peer"], PEER_MODES, name)
        self.assertEqual(ARMS["FDW+H16@quant.gemm_path=fp8"]["routes"], {"mxfp4": "hopper-fp8"})
        self.assertEqual(ARMS["FDW+H16@quant.gemm_path=fp8-where-exact"]["routes"], {"mxfp4": "mxfp4-as-fp8"})
        self.assertEqual(ARMS["fp8@quant.fp8_scaling=delayed"]["routes"], {"fp8": "fp8-tensorwise"})
        self.assertEqual(ARMS["bf16"]["routes"], {})

    def test_the_written_config_is_the_arms(self):
        for name in ARMS:
            out = self.config(name)
            self.assertEqual(out.returncode, 0, f"{name}: {out.stderr}")
            c = json.loads(out.stdout)
            self.assertEqual(c["arm"], name)
            self.assertEqual(c["model"], "llama-1.3b")
            self.assertEqual((c["data"]["dataset"], c["data"]["seq_len"]), (self.data, 2048))
            self.assertEqual((c["train"]["global_batch_tokens"], c["train"]["micro_batch_tokens"],
                              c["train"]["max_tokens"]), (65536, 16384, 10 * 65536))
            keys = bench_arms.keys(name)
            self.assertEqual(c["precision"], keys["precision"], name)
            for section in ("quant", "train"):
                for key, value in keys.get(section, {}).items():
                    self.assertEqual(c[section][key], value, f"{name}: {section}.{key}")
        self.assertTrue(json.loads(self.config("FDW+H16@train.fused_producers=true").stdout)["train"]["fused_producers"])
        # EXTRA merges over the arm's keys instead of replacing them.
        out = self.config("FDW+H16", '{"quant": {"gemm_path": "emulated"}, "train": {"activation_checkpointing": true}}')
        self.assertEqual(out.returncode, 0, out.stderr)
        c = json.loads(out.stdout)
        self.assertEqual(c["quant"]["gemm_path"], "emulated")
        self.assertEqual(c["quant"]["hadamard"], RECIPE_ARMS["FDW+H16"]["keys"]["quant"]["hadamard"])
        self.assertTrue(c["train"]["activation_checkpointing"])
        # A CPU run of the trainer checks (threads) goes through the same writer.
        out = self.config("FDW", device="cpu")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["device"], "cpu")
        # Refusals: one line, exit 2, nothing on stdout: an unknown arm (bench_arms.py), a key or
        # value the contract does not know (mxablate plan).
        for arm, extra, text in (("mxfp4+h32", "{}", "bench_arms: unknown arm 'mxfp4+h32' (known: " + ", ".join(ARMS) + ")"),
                                 ("FDW", '{"train": {"fused_producer": true}}', "fused_producer"),
                                 ("FDW", '{"quant": {"gemm_path": "fp16"}}', "gemm_path")):
            out = self.config(arm, extra)
            self.assertEqual(out.returncode, 2, (arm, extra, out.stderr))
            self.assertEqual(out.stdout, "")
            lines = out.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, out.stderr)
            self.assertIn(text, lines[0])

    def test_one_config_builder_and_one_event_reader(self):
        self.assertIn('bench_arms.py" config "$MXABLATE" "$DATA" "$@"', source("scripts/gpu-trainer-lib.sh"))
        self.assertIn('[mxablate, "plan", path, "--json"]', source("scripts/bench_arms.py"))
        for name in os.listdir(SCRIPTS):
            if not name.endswith((".sh", ".py")):
                continue
            text = source("scripts", name)
            # A run config's keys spelt as JSON: only bench_arms.py writes them (its recipe's base).
            if name != "bench_arms.py":
                self.assertNotRegex(text, r'"(max_tokens|global_batch_tokens)":', name)
            # No script reads an event log itself: run_figures.py has `mxablate ingest` store it.
            self.assertNotRegex(text, r"open\([^)]*events\.jsonl|grep[^\n]*events\.jsonl", name)
        # A script that starts a trainer on a run directory has its config from `config`.
        for name in gpu_scripts():
            text = source("scripts", name)
            if '"$TRAIN" --run-dir "$dir"' in text:
                self.assertRegex(text, r'\bconfig (cuda|"\$@")', name)

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
        self.assertEqual(bench_arms.peer_runs(list(ARMS)), ["bf16", "fp8", "FDW", "FDW+H16"])

    def test_every_arm_the_gpu_scripts_train_is_in_the_table(self):
        used = set()
        for name in gpu_scripts():
            text = source("scripts", name)
            if "gpu-trainer-lib.sh" not in text or name == "gpu-trainer-lib.sh":
                continue
            for lst in re.findall(r"for prec in ([^;]+); do", text):
                used |= set(lst.split())
            # run NAME DEVICE MODEL ARM …: a literal arm (variables come from the loops above).
            for arm in re.findall(r'\brun "?[\w$.{}+-]+"? (?:cpu|cuda) [\w$.{}-]+ ([\w+.=@-]+) ', text):
                used.add(arm)
        self.assertTrue(used >= {"bf16", "FDW", "FDW+H16", "fp8"}, used)
        self.assertLessEqual(used, set(ARMS), used - set(ARMS))
        # The arm lists given to the benches, by the scripts and by the documented commands.
        lists = []
        for path in [os.path.join("scripts", n) for n in gpu_scripts()] + ["docs/performance.md", "README.md"]:
            lists += re.findall(r"--(?:peer-)?arms \"?([A-Za-z0-9+.,=@_-]+)", source(path))
            lists += re.findall(r"\bARMS=([A-Za-z0-9+.,=@_-]+)", source(path))
        self.assertIn("bf16,fp8,FDW+H16,FDW+H16@quant.gemm_path=fp8", lists)
        for lst in lists:
            if lst not in ("none", "LIST"):  # "LIST" is the metavariable of the scripts' usage lines
                bench_arms.parse_list(lst)

    def test_the_bench_and_the_report_take_their_arms_from_the_table(self):
        bench = source("scripts/gpu-speed-bench.sh")
        self.assertIn("bench_arms.py names", bench)
        self.assertIn("bench_arms.py peer-runs", bench)
        self.assertIn("bench_arms.py check", bench)
        self.assertNotRegex(bench, r"ARMS=\((?!\))")  # no arm list of its own
        report = source("scripts/speed-report.py")
        self.assertIn("from bench_arms import ARMS", report)
        self.assertNotIn("label", report)  # an arm is printed by its name

    def test_list_parsing(self):
        self.assertEqual(bench_arms.parse_list("bf16, FDW+H16 bf16"), ["bf16", "FDW+H16"])
        for bad in ("", "bf16,nope", "bf16,mxfp4", "FDW+H16@quant.gemm_path=emulated"):
            with self.assertRaises(bench_arms.UnknownArm):
                bench_arms.parse_list(bad)
        out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_arms.py"), "check", "bf16,fdw"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr.strip().splitlines(), ["bench_arms: unknown arm 'fdw' (known: "
                                                           + ", ".join(ARMS) + ")"])

    def test_shapes_are_the_trainer_presets(self):
        presets = {m: tuple(map(int, g)) for m, *g in re.findall(
            r'\{"(llama-[\w.]+)", (\d+), (\d+), (\d+), (\d+), (\d+),', find_source("model_presets.cpp", "trainer"))}
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
