#!/usr/bin/env python3
"""The arms the speed benchmark and the GPU checks train, by the recipes' names, and the one-run
recipes through which their run configs are written.

An arm is either an arm of the recipes, with the recipes' keys (recipes/extra-tokens-20m.yaml
names every one: fp8, FDW, FDW+H16, FD, FDW+SR, FDW+RHT16, F, bf16; the bench trains bf16, fp8,
FDW and FDW+H16, the numerics the compiled peer also implements), or an execution variant of one
of them: the same numerics run another way, named

    RECIPE_ARM@CONFIG_KEY=VALUE          e.g. FDW+H16@quant.gemm_path=fp8

which means the recipe arm's keys with one more key of config.json set (a dotted path; VALUE is
JSON's true or false or a number where it reads as one, else a string). The name is the
definition: a variant's keys are read from its name (`keys`), so a name cannot say one thing and
mean another. Recipe arm names may hold '@' and '=' (orchestrator/lib/recipe_loader.cpp), so
every name here is also a valid recipe arm: it is the `arm` of the configs written for it. Only
the names of `NAMES` are accepted; a name the bench had before it took the recipes' names is
refused with one line naming its new name.

Each arm also has:
  peer    the compiled PyTorch peer's implementation of the same numerics (peer_llama.py's
          modes): "bf16", "fp8" (per-tensor E4M3 X and W, E5M2 dY, current scaling: the peer has
          no delayed scaling, so fp8@quant.fp8_scaling=delayed is compared with its current
          scaling), "fdw" (MXFP4 on all three GEMMs), "fdw+h16" (and the deterministic 16-point
          Hadamard rotation on Wgrad). The peer has no FP8-tensor-core MXFP4 path: a variant that
          sends MXFP4 there is compared with the peer's emulation of the same numerics.
  routes  what run_start's gemm_routes must say for a figure to be this arm's (`routes`): FP8
          GEMMs on FP8 tensor cores, MXFP4 ones emulated unless the arm asks for the Hopper FP8
          path (gemm_path fp8) or the per-tensor one where exact (fp8-where-exact).

Run configs (`config`, scripts/gpu-trainer-lib.sh's `config`): a one-run recipe (the GPU
scripts' run shape as `base`, the arm as its one arm, EXTRA merged over the arm's keys) handed to
`mxablate plan --json`, whose config is what `mxablate run` writes to config.json: the contract's
writer, after the contract's parser and the trainer's start checks.

Usage (for bash):
  bench_arms.py names                    the arms in table order, one per line
  bench_arms.py check ARM[,ARM…]         the arms, one per line, or exit 2 naming an unknown one
  bench_arms.py peer-runs ARM[,ARM…]     the arms the peer must run for these: the first arm of
                                         each distinct peer implementation, one per line
  bench_arms.py config MXABLATE DATASET DEVICE MODEL ARM SEQ GLOBAL MICRO STEPS EVAL_EVERY_STEPS
                       EVAL_TOKENS THREADS [EXTRA]
                                         the run's config.json as MXABLATE plan --json writes it, or
                                         exit 2 with one line (a bad arm, key or value)
Plain python 3, no torch: the report, the peer and the tests import it.
"""
import json
import os
import subprocess
import sys
import tempfile


def _all(precision):
    return {"fprop": precision, "dgrad": precision, "wgrad": precision}


# The recipe arms the bench trains, with the recipes' keys (bench_arms_test.py checks them against
# recipes/extra-tokens-20m.yaml as `mxablate plan` resolves it) and the peer's implementation.
RECIPE_ARMS = {
    "bf16": dict(keys={"precision": _all("bf16")}, peer="bf16"),
    "fp8": dict(keys={"precision": _all("fp8")}, peer="fp8"),
    "FDW": dict(keys={"precision": _all("mxfp4")}, peer="fdw"),
    "FDW+H16": dict(keys={"precision": _all("mxfp4"),
                          "quant": {"hadamard": {"mode": "deterministic", "size": 16, "gemms": ["wgrad"]}}},
                    peer="fdw+h16"),
}

# Every arm, in table order: the recipe arms, each followed by its execution variants.
NAMES = (
    "bf16",
    "fp8",
    "fp8@quant.fp8_scaling=delayed",
    "FDW",
    "FDW+H16",
    "FDW+H16@train.fused_producers=true",  # SwiGLU's kernels quantize h, dg and du
    "FDW+H16@quant.gemm_path=fp8",
    "FDW+H16@quant.gemm_path=fp8-where-exact",
)

# The names before the bench took the recipes' names: refused, each naming what replaced it.
RENAMED = {
    "mxfp4": "FDW",
    "mxfp4+h16": "FDW+H16",
    "fp8+delayed": "fp8@quant.fp8_scaling=delayed",
    "mxfp4+h16+producers": "FDW+H16@train.fused_producers=true",
    "mxfp4+h16+fp8path": "FDW+H16@quant.gemm_path=fp8",
    "mxfp4+h16+exact": "FDW+H16@quant.gemm_path=fp8-where-exact",
}

# The peer's implementations (peer_llama.py's QuantLinearFn modes).
PEER_MODES = ("bf16", "fp8", "fdw", "fdw+h16")

# The sweep name of the one-run recipes (config.json's `sweep`).
SWEEP = "gpu-scripts"


class UnknownArm(ValueError):
    pass


def merge(base, over):
    """`over` merged into `base` key by key (mappings recursively, anything else replaced), as a
    recipe arm's keys are merged over its base."""
    for k, v in over.items():
        base[k] = merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return base


def _value(text):
    try:
        v = json.loads(text)
    except ValueError:
        return text
    return v if isinstance(v, (bool, int, float)) else text


def split(name):
    """'FDW+H16@quant.gemm_path=fp8' → ('FDW+H16', {'quant': {'gemm_path': 'fp8'}}); a recipe arm
    → (name, {})."""
    recipe_arm, _, setting = name.partition("@")
    if not setting:
        return recipe_arm, {}
    path, _, value = setting.partition("=")
    keys = _value(value)
    for part in reversed(path.split(".")):
        keys = {part: keys}
    return recipe_arm, keys


def keys(name):
    """The arm's config keys, as a recipe arm's: the recipe arm's, with the variant's key set."""
    recipe_arm, setting = split(name)
    return merge(json.loads(json.dumps(RECIPE_ARMS[recipe_arm]["keys"])), setting)


def routes(name):
    """{GEMM precision: the route run_start must report for it} for the arm's precisions."""
    k = keys(name)
    path = k.get("quant", {}).get("gemm_path", "auto")
    out = {}
    for precision in sorted(set(k["precision"].values())):
        if precision == "fp8":
            out["fp8"] = "fp8-tensorwise"
        elif precision == "mxfp4":
            out["mxfp4"] = {"fp8": "hopper-fp8", "fp8-where-exact": "mxfp4-as-fp8"}.get(path, "emulated")
    return out


ARMS = {n: dict(recipe_arm=split(n)[0], keys=keys(n), peer=RECIPE_ARMS[split(n)[0]]["peer"], routes=routes(n))
        for n in NAMES}


def arm(name):
    """The table's entry for `name`, or UnknownArm with one line naming the arms."""
    if name in RENAMED:
        raise UnknownArm(f"'{name}' is an old arm name: the arms take the recipes' names, this one is now "
                         f"'{RENAMED[name]}' (known: {', '.join(ARMS)})")
    if name not in ARMS:
        raise UnknownArm(f"unknown arm '{name}' (known: {', '.join(ARMS)})")
    return ARMS[name]


def parse_list(text):
    """'bf16,fp8' (commas or spaces) → ['bf16', 'fp8'], each checked; duplicates dropped."""
    names = []
    for n in text.replace(",", " ").split():
        arm(n)
        if n not in names:
            names.append(n)
    if not names:
        raise UnknownArm("empty arm list")
    return names


def peer_runs(names):
    """The arms among `names` the peer runs: one per distinct peer implementation, the first
    arm that has it (the others read that run's figure: same numerics, same peer program)."""
    seen, runs = set(), []
    for n in names:
        mode = arm(n)["peer"]
        if mode not in seen:
            seen.add(mode)
            runs.append(n)
    return runs


def run_keys(dataset, device, model, seq, global_tokens, micro_tokens, steps, eval_every_steps, eval_tokens,
             threads):
    """The GPU scripts' run shape as config keys: `steps` steps of `global_tokens` (a tenth of them
    warm-up), evaluation every `eval_every_steps` steps, no checkpoints, train telemetry every step
    of a short run and every tenth of a longer one."""
    return {"model": model, "device": device, "threads": threads,
            "data": {"dataset": dataset, "seq_len": seq},
            "train": {"global_batch_tokens": global_tokens, "micro_batch_tokens": micro_tokens,
                      "max_tokens": global_tokens * steps, "lr": 1e-3,
                      "warmup_tokens": global_tokens * max(1, steps // 10), "seed": 1},
            "eval": {"every_tokens": global_tokens * eval_every_steps, "tokens": eval_tokens},
            "checkpoint": {"every_steps": 0},
            "telemetry": {"train_every_steps": 1 if steps <= 50 else 10, "quant_every_steps": 0}}


def recipe(name, base, extra=None):
    """The one-run recipe of arm `name` on `base` (config keys), `extra` merged over the arm's keys."""
    return {"name": SWEEP, "base": base, "arms": {name: merge(json.loads(json.dumps(arm(name)["keys"])), extra or {})}}


class ConfigRefused(Exception):
    pass


def write_config(mxablate, one_run_recipe):
    """The config `mxablate plan --json` resolves for the recipe's one run; ConfigRefused with
    plan's error lines (its warnings, about sweeps, left out) where it refuses the recipe."""
    with tempfile.TemporaryDirectory(prefix="mxablate-config.") as tmp:
        path = os.path.join(tmp, "recipe.yaml")  # JSON is YAML
        with open(path, "w", encoding="utf-8") as f:
            json.dump(one_run_recipe, f, indent=1)
        out = subprocess.run([mxablate, "plan", path, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        errors = [l for l in out.stderr.splitlines() if l.strip() and not l.startswith("mxablate: warning: ")]
        raise ConfigRefused("\n".join(errors) or f"{mxablate} plan exited {out.returncode}")
    try:
        plan = json.loads(out.stdout)
        if not isinstance(plan, list) or len(plan) != 1 or not isinstance(plan[0].get("config"), dict):
            raise ValueError("not the plan of one run")
    except (ValueError, AttributeError) as e:
        raise ConfigRefused(f"{mxablate} plan --json: {e}")
    return plan[0]["config"]


def main(argv):
    try:
        if len(argv) == 1 and argv[0] == "names":
            print("\n".join(ARMS))
        elif len(argv) == 2 and argv[0] == "check":
            print("\n".join(parse_list(argv[1])))
        elif len(argv) == 2 and argv[0] == "peer-runs":
            print("\n".join(peer_runs(parse_list(argv[1]))))
        elif argv[:1] == ["config"] and len(argv) in (13, 14):
            mxablate, dataset, device, model, name = argv[1:6]
            try:
                numbers = [int(a) for a in argv[6:13]]
                extra = json.loads(argv[13]) if len(argv) == 14 else {}
                if not isinstance(extra, dict):
                    raise ValueError
            except ValueError:
                print(f"bench_arms: config: SEQ … THREADS must be integers and EXTRA a JSON object: "
                      f"{' '.join(argv[6:])}", file=sys.stderr)
                return 2
            config = write_config(mxablate, recipe(name, run_keys(dataset, device, model, *numbers), extra))
            print(json.dumps(config, indent=2))
        else:
            print("usage: bench_arms.py names | check LIST | peer-runs LIST | config MXABLATE DATASET DEVICE MODEL "
                  "ARM SEQ GLOBAL MICRO STEPS EVAL_EVERY_STEPS EVAL_TOKENS THREADS [EXTRA]", file=sys.stderr)
            return 2
    except UnknownArm as e:
        print(f"bench_arms: {e}", file=sys.stderr)
        return 2
    except ConfigRefused as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
