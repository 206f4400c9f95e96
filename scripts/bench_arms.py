#!/usr/bin/env python3
"""The arms of the speed benchmark, named once (issue 20): what each name means in our trainer's
config (gpu-trainer-lib.sh's `config`) and which fake quantization the compiled PyTorch peer
(peer_llama.py) runs for it, so that an arm has one name in the bench, its results, the peer
and the report (speed-report.py). Plain python, no torch: the report and its tests import it on
machines without torch.

Each arm:
  label      what the report prints
  precision  the config's precision of all three GEMMs (fprop, dgrad, wgrad)
  quant      the config's `quant` section ({} where the defaults are meant)
  train      (optional) execution keys of the config's `train` section: the same numerics run
             another way (mxfp4+h16+producers: SwiGLU's kernels quantize h, dg and du)
  peer       the peer's implementation of the same numerics: "bf16", "fp8" (per-tensor E4M3
             X and W, E5M2 dY, current scaling: the peer has no delayed scaling, so the
             fp8+delayed arm is compared with its current-scaling FP8), "fdw" (MXFP4 on all three
             GEMMs), "fdw+h16" (and the 16-point
             Hadamard rotation on Wgrad). The peer has no FP8-tensor-core MXFP4 path: the arm
             that sends MXFP4 there is compared with the peer's emulation of the same numerics.
  routes     what run_start's gemm_routes must say for the figure to be this arm's (a GEMM
             precision → route): the FP8 arm is meant on FP8 tensor cores, the MXFP4 arms
             emulated unless they ask for the Hopper FP8 path (fp8) or the per-tensor one where
             exact (fp8-where-exact).

Usage (for bash):
  bench_arms.py names                    the arms in table order, one per line
  bench_arms.py check ARM[,ARM…]         the arms, one per line, or exit 2 naming an unknown one
  bench_arms.py peer-runs ARM[,ARM…]     the arms the peer must run for these: the first arm of
                                         each distinct peer implementation, one per line
  bench_arms.py config ARM               the config keys of the arm (JSON)
"""
import json
import sys

# The paper's deterministic 16-point Hadamard rotation, on Wgrad only (the FDW+H16 arm).
H16 = {"hadamard": {"mode": "deterministic", "size": 16, "gemms": ["wgrad"]}}

ARMS = {
    "bf16": dict(label="BF16", precision="bf16", quant={}, peer="bf16", routes={}),
    "fp8": dict(label="FP8 F+D+W (tensor-wise)", precision="fp8", quant={}, peer="fp8",
                routes={"fp8": "fp8-tensorwise"}),
    "fp8+delayed": dict(label="FP8 F+D+W (tensor-wise, delayed scaling)", precision="fp8",
                        quant={"fp8_scaling": "delayed"}, peer="fp8", routes={"fp8": "fp8-tensorwise"}),
    "mxfp4": dict(label="MXFP4 F+D+W", precision="mxfp4", quant={}, peer="fdw",
                  routes={"mxfp4": "emulated"}),
    "mxfp4+h16": dict(label="MXFP4 F+D+W+H16", precision="mxfp4", quant=H16, peer="fdw+h16",
                      routes={"mxfp4": "emulated"}),
    "mxfp4+h16+producers": dict(label="MXFP4 F+D+W+H16, fused producers", precision="mxfp4", quant=H16,
                                train={"fused_producers": True}, peer="fdw+h16", routes={"mxfp4": "emulated"}),
    "mxfp4+h16+fp8path": dict(label="MXFP4 F+D+W+H16, gemm_path fp8", precision="mxfp4",
                              quant={**H16, "gemm_path": "fp8"}, peer="fdw+h16",
                              routes={"mxfp4": "hopper-fp8"}),
    "mxfp4+h16+exact": dict(label="MXFP4 F+D+W+H16, gemm_path fp8-where-exact", precision="mxfp4",
                            quant={**H16, "gemm_path": "fp8-where-exact"}, peer="fdw+h16",
                            routes={"mxfp4": "mxfp4-as-fp8"}),
}

# The peer's implementations (peer_llama.py's QuantLinearFn modes).
PEER_MODES = ("bf16", "fp8", "fdw", "fdw+h16")


class UnknownArm(ValueError):
    pass


def arm(name):
    """The table's entry for `name`, or UnknownArm with one line naming the known ones."""
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


def config(name):
    """The config keys that make a trainer run this arm: `arm`, `precision` and, where the arm
    sets any, `quant` and `train`."""
    a = arm(name)
    p = a["precision"]
    c = {"arm": name, "precision": {"fprop": p, "dgrad": p, "wgrad": p}}
    if a["quant"]:
        c["quant"] = json.loads(json.dumps(a["quant"]))  # a copy: callers merge into it
    if a.get("train"):
        c["train"] = dict(a["train"])
    return c


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


def main(argv):
    try:
        if len(argv) == 1 and argv[0] == "names":
            print("\n".join(ARMS))
        elif len(argv) == 2 and argv[0] == "check":
            print("\n".join(parse_list(argv[1])))
        elif len(argv) == 2 and argv[0] == "peer-runs":
            print("\n".join(peer_runs(parse_list(argv[1]))))
        elif len(argv) == 2 and argv[0] == "config":
            print(json.dumps(config(argv[1])))
        else:
            print("usage: bench_arms.py names | check LIST | peer-runs LIST | config ARM", file=sys.stderr)
            return 2
    except UnknownArm as e:
        print(f"bench_arms: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
