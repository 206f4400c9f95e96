#!/usr/bin/env bash
# scripts/gpu-speed-bench.sh's plumbing on the CPU: a fake mxablate-train (writes the events a run
# would, at a rate per arm), a fake nvidia-smi and a fake torch module that only names the GPU.
# Checks a part of the bench (--only, --arms, --no-peer, --no-baselines, --results): the configs it
# writes through the real config writer, mxablate (the arm table's keys, activation checkpointing at
# llama-1.3b, 10 steps), the lines it appends (a header naming the GPU, one line per run, a failed
# run's exit code), that a second call appends, the report at its end, and bad arguments, an arm's
# old name among them (one line, exit 2).
#
#   speed_bench_fake_test.sh REPO_ROOT MXABLATE
set -euo pipefail
REPO=$(cd "${1:?usage: speed_bench_fake_test.sh REPO_ROOT MXABLATE}" && pwd)
MXABLATE=$(realpath "${2:?usage: speed_bench_fake_test.sh REPO_ROOT MXABLATE}")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/build/bin" "$T/py/torch" "$T/data"
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$T/bin/nvidia-smi" <<'EOF'
#!/bin/sh
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-fake)"
EOF
cat >"$T/py/torch/__init__.py" <<'EOF'
# Only what the bench's header line asks of torch.
__version__ = "0.0-fake"


class cuda:
    @staticmethod
    def get_device_name():
        return "NVIDIA H100 80GB HBM3"
EOF
# The fake trainer: FDW "runs out of memory" (exit 5), the others train at a rate per arm
# (steps 1-3 slow, as warm-up is), with run_start's gemm_routes as the config asks.
cat >"$T/build/bin/mxablate-train" <<'EOF'
#!/usr/bin/env python3
import json, sys
d = sys.argv[sys.argv.index("--run-dir") + 1]
c = json.load(open(d + "/config.json"))
if c["arm"] == "FDW":
    print("mxablate-train: out of GPU memory: fake", file=sys.stderr)
    sys.exit(5)
fp8path = c["quant"]["gemm_path"] == "fp8"
routes = {"setting": "fp8" if fp8path else "auto", "bf16": "emulated", "fp8": "fp8-tensorwise",
          "mxfp4": "hopper-fp8" if fp8path else "emulated", "nvfp4": "emulated"}
rate = {"bf16": 50000.0, "fp8": 60000.0, "FDW+H16": 45000.0, "FDW+H16@quant.gemm_path=fp8": 58000.0}[c["arm"]]
step_tokens = int(c["train"]["global_batch_tokens"])
steps = int(c["train"]["max_tokens"]) // step_tokens  # the contract writes numbers as doubles
# Events as the contract has them (event_line.h): mxablate ingest reads them for run_figures.py.
lines = [dict(kind="run_start", step=0, tokens=0, params=1231128576, gemm_routes=routes)]
lines += [dict(kind="train", step=s, tokens=s * step_tokens, loss=5.0, tokens_per_s=rate if s > 3 else 10.0)
          for s in range(1, steps + 1)]
lines.append(dict(kind="run_end", step=steps, tokens=steps * step_tokens, status="budget_exhausted",
                  tokens_per_s=rate, peak_gpu_bytes=25 * 2 ** 30))
with open(d + "/events.jsonl", "w") as f:
    f.writelines(json.dumps({"seq": i, "time": 1.7e9 + i, **e}) + "\n" for i, e in enumerate(lines, 1))
print("mxablate-train: budget_exhausted (fake)")
EOF
chmod +x "$T/bin/nvidia-smi" "$T/build/bin/mxablate-train"
ln -s "$MXABLATE" "$T/build/bin/mxablate"
# A manifest the launch checks accept (vocabulary 4,096); nothing reads shards here.
cp "$REPO/tests/orchestrator/fake-dataset/manifest.json" "$T/data/manifest.json"

export PATH="$T/bin:$PATH" PYTHONPATH="$T/py" PY=python3 MXABLATE_GPU_BUILD_DIR="$T/build" MXABLATE_BENCH_OUT="$T/out"
# Carried packages, if the tree has any, unpack here, not into the tree (scripts/gpu-env.sh).
export MXABLATE_CARRY_PREFIX="$T/prefix"
bench() { bash "$REPO/scripts/gpu-speed-bench.sh" "$T/data" "$@"; }

# Bad arguments: one line on stderr, exit 2, before anything runs.
for args in "--arms bf16,fdw" "--arms bf16,mxfp4+h16" "--only llama-8b" "--peer-arms nope" "--arms" "--frobnicate"; do
  rc=0
  # shellcheck disable=SC2086  # each is a list of arguments
  bench $args >"$T/stdout" 2>"$T/stderr" || rc=$?
  [ "$rc" = 2 ] || fail "[$args] exit $rc, wanted 2"
  [ "$(wc -l <"$T/stderr")" = 1 ] || fail "[$args] stderr is not one line: $(cat "$T/stderr")"
  [ ! -e "$T/out/results.jsonl" ] || fail "[$args] wrote results"
done
# An arm's old name: the line names the new one.
bench --arms bf16,mxfp4+h16 >/dev/null 2>"$T/stderr" || true
grep -q "'mxfp4+h16' is an old arm name: .* now 'FDW+H16'" "$T/stderr" || fail "old name: $(cat "$T/stderr")"

# One part: llama-1.3b, three arms and the failing one, no peer, no baselines.
bench --only llama-1.3b --arms bf16,fp8,FDW,FDW+H16@quant.gemm_path=fp8 --no-peer --no-baselines \
  --results "$T/res/part1.jsonl" >"$T/part1.txt" 2>&1 || fail "part 1 exited $?: $(tail -5 "$T/part1.txt")"
python3 - "$T" "$REPO" <<'PYEOF' || fail "part 1's configs or results"
import json, sys
t, repo = sys.argv[1], sys.argv[2]
sys.path.insert(0, repo + "/scripts")
from bench_arms import keys
lines = [json.loads(l) for l in open(t + "/res/part1.jsonl")]
assert lines[0]["who"] == "call" and lines[0]["gpu"] == "NVIDIA H100 80GB HBM3" and lines[0]["vocab"] == 4096, lines[0]
assert "--only llama-1.3b" in lines[0]["args"], lines[0]
ours = {l["arm"]: l for l in lines if l["who"] == "ours"}
assert list(ours) == ["bf16", "fp8", "FDW", "FDW+H16@quant.gemm_path=fp8"], list(ours)
assert ours["fp8"]["tokens_per_s"] == 60000.0 and ours["fp8"]["samples"] == 7, ours["fp8"]
assert ours["FDW"]["exit"] == 5 and "tokens_per_s" not in ours["FDW"], ours["FDW"]
assert ours["FDW"]["error"] == "mxablate-train: out of GPU memory: fake", ours["FDW"]
for arm in ours:
    c = json.load(open(f"{t}/out/ours-llama-1.3b-{arm}/config.json"))
    assert c["arm"] == arm and c["sweep"] == "gpu-scripts" and c["run_id"], (arm, c)
    k = keys(arm)
    assert c["precision"] == k["precision"], (arm, c)
    for key, value in k.get("quant", {}).items():
        assert c["quant"][key] == value, (arm, key, c)
    assert c["train"]["activation_checkpointing"] is True, c
    assert (c["data"]["seq_len"], c["train"]["global_batch_tokens"], c["train"]["micro_batch_tokens"],
            c["train"]["max_tokens"]) == (2048, 65536, 16384, 10 * 65536), c
PYEOF
grep -q '^| llama-1.3b fp8 step ÷ bf16 step | .* | 0.833× | ≤ 0.800× | NOT MET | call 1 |$' \
  "$T/part1.txt" || fail "part 1's report: $(grep -A12 'Speed targets' "$T/part1.txt")"
grep -q 'llama-125m fp8 .* | not measured: no fp8 run |' "$T/part1.txt" || fail "not measured at 125m"
grep -q '^    ours-llama-1.3b-FDW+H16@quant.gemm_path=fp8: 58,000 tokens/s | 58,000 | peak GPU 25.0 GiB$' "$T/part1.txt" ||
  fail "the run's summary line: $(grep 'ours-llama-1.3b-FDW+H16' "$T/part1.txt")"

# A second call into the same file appends: two headers, and the 125m figures beside the 1.3b ones.
bench --only llama-125m --arms bf16,fp8 --no-peer --no-baselines --results "$T/res/part1.jsonl" \
  >"$T/part2.txt" 2>&1 || fail "part 2 exited $?: $(tail -5 "$T/part2.txt")"
[ "$(grep -c '"who": "call"' "$T/res/part1.jsonl")" = 2 ] || fail "the second call did not append"
python3 -c 'import json, sys; sys.exit(1 if json.load(open(sys.argv[1]))["train"].get("activation_checkpointing") else 0)' \
  "$T/out/ours-llama-125m-bf16/config.json" || fail "llama-125m checkpoints activations"
grep -q '^| llama-125m fp8 step ÷ bf16 step | .* | 0.833× | ≤ 1.000× | met | call 2 |$' \
  "$T/part2.txt" || fail "part 2's report: $(grep -A12 'Speed targets' "$T/part2.txt")"
grep -q '^| llama-1.3b fp8 step ÷ bf16 step | .* | call 1 |$' "$T/part2.txt" ||
  fail "part 2's report lost call 1's figures"
echo "speed_bench_fake_test: passed"
