#!/usr/bin/env bash
# scripts/gpu-ab-bench.sh and speed-report.py --compare on the CPU: two fake trainers (the before tree's
# inside its archive, this tree's in its own build directory) that train at different rates, a fake
# nvidia-smi and a fake torch that only names the GPU; both trees write configs with the real
# mxablate. Checks the table (each arm in each tree, after ÷ before, each tree's step ÷ its own
# bf16), that two identical trainers are refused (the comparison of a tree with itself this script
# exists to prevent), that a before tree naming the arms otherwise is refused, bad arguments (one
# line, exit 2), and --compare's refusals (results from two GPUs, a file that is no results file).
#
#   ab_bench_fake_test.sh REPO_ROOT MXABLATE
set -euo pipefail
REPO=$(cd "${1:?usage: ab_bench_fake_test.sh REPO_ROOT MXABLATE}" && pwd)
MXABLATE=$(realpath "${2:?usage: ab_bench_fake_test.sh REPO_ROOT MXABLATE}")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$T/bin" "$T/py/torch" "$T/data" "$T/after/bin" "$T/tree/build-gpu/bin"

cat >"$T/bin/nvidia-smi" <<'PYEOF'
#!/bin/sh
echo "GPU 0: NVIDIA H200 (UUID: GPU-fake)"
PYEOF
cat >"$T/py/torch/__init__.py" <<'PYEOF'
__version__ = "0.0-fake"


class cuda:
    @staticmethod
    def get_device_name():
        return "NVIDIA H200"
PYEOF
# fake_trainer RATES: writes the events of a run at a rate per arm.
fake_trainer() {
  cat <<PYEOF
#!/usr/bin/env python3
import json, sys
d = sys.argv[sys.argv.index("--run-dir") + 1]
c = json.load(open(d + "/config.json"))
rate = $1[c["arm"]]
step_tokens = int(c["train"]["global_batch_tokens"])
steps = int(c["train"]["max_tokens"]) // step_tokens  # the contract writes numbers as doubles
# Events as the contract has them (event_line.h): mxablate ingest reads them for run_figures.py.
lines = [dict(kind="run_start", step=0, tokens=0)]
lines += [dict(kind="train", step=s, tokens=s * step_tokens, loss=5.0, tokens_per_s=rate if s > 3 else 10.0)
          for s in range(1, steps + 1)]
lines.append(dict(kind="run_end", step=steps, tokens=steps * step_tokens, status="budget_exhausted",
                  peak_gpu_bytes=2 ** 30))
with open(d + "/events.jsonl", "w") as f:
    f.writelines(json.dumps({"seq": i, "time": 1.7e9 + i, **e}) + "\n" for i, e in enumerate(lines, 1))
print("mxablate-train: budget_exhausted (fake)")
PYEOF
}
fake_trainer '{"bf16": 40000.0, "FDW+H16": 32000.0}' >"$T/tree/build-gpu/bin/mxablate-train"
fake_trainer '{"bf16": 50000.0, "FDW+H16": 45000.0}' >"$T/after/bin/mxablate-train"
chmod +x "$T/bin/nvidia-smi" "$T/tree/build-gpu/bin/mxablate-train" "$T/after/bin/mxablate-train"
ln -s "$MXABLATE" "$T/tree/build-gpu/bin/mxablate" && ln -s "$MXABLATE" "$T/after/bin/mxablate"
cp -r "$REPO/scripts" "$T/tree/scripts"
tar -czf "$T/before.tar.gz" -C "$T/tree" .
# A manifest the launch checks accept (vocabulary 4,096); nothing reads shards here.
cp "$REPO/tests/orchestrator/fake-dataset/manifest.json" "$T/data/manifest.json"

export PATH="$T/bin:$PATH" PYTHONPATH="$T/py" MXABLATE_GPU_BUILD_DIR="$T/after" MXABLATE_AB_DIR="$T/ab" OUT="$T/out"
# Carried packages, if the tree has any, unpack here, not into the tree (scripts/gpu-env.sh).
export MXABLATE_CARRY_PREFIX="$T/prefix"
ab() { bash "$REPO/scripts/gpu-ab-bench.sh" "$@"; }

for args in "$T/before.tar.gz $T/data" "$T/before.tar.gz $T/data --only llama-8b" \
            "$T/before.tar.gz $T/data --only llama-125m --arms fdw" "$T/before.tar.gz $T/data --only llama-125m --arms mxfp4+h16" \
            "$T/nope.tar.gz $T/data --only llama-125m" \
            "$T/before.tar.gz $T/data --only llama-125m --frobnicate"; do
  rc=0
  # shellcheck disable=SC2086  # each is a list of arguments
  ab $args >"$T/stdout" 2>"$T/stderr" || rc=$?
  [ "$rc" = 2 ] || fail "[$args] exit $rc, wanted 2"
  [ "$(wc -l <"$T/stderr")" = 1 ] || fail "[$args] stderr is not one line: $(cat "$T/stderr")"
done

ab "$T/before.tar.gz" "$T/data" --only llama-125m,llama-1.3b >"$T/ab.txt" 2>&1 || fail "the comparison exited $?: $(tail -5 "$T/ab.txt")"
grep -qxF '| llama-125m | bf16 | 40,000 | 50,000 | 1.250× (+25.0 %) | 1.000× | 1.000× |' "$T/ab.txt" ||
  fail "llama-125m bf16: $(cat "$T/ab.txt")"
grep -qxF '| llama-1.3b | FDW+H16 | 32,000 | 45,000 | 1.406× (+40.6 %) | 1.250× | 1.111× |' "$T/ab.txt" ||
  fail "llama-1.3b FDW+H16: $(cat "$T/ab.txt")"
grep -q '^before: .*ab-before.jsonl, after: .*ab-after.jsonl; NVIDIA H200$' "$T/ab.txt" || fail "the table's header: $(cat "$T/ab.txt")"
# The before runs ran the before tree's trainer: its configs sit in the before tree's run dirs.
[ -f "$T/ab/runs-before/ours-llama-125m-bf16/config.json" ] || fail "no before run of llama-125m"

# --compare: two GPUs, a file that is not a results file, wrong arguments.
sed 's/NVIDIA H200/NVIDIA H100 80GB HBM3/' "$T/out/ab-after.jsonl" >"$T/h100.jsonl" 2>/dev/null ||
  fail "no after results file"
compare() { python3 "$REPO/scripts/speed-report.py" --compare "$@" >/dev/null 2>"$T/err"; }
rc=0; compare "$T/out/ab-before.jsonl" "$T/h100.jsonl" || rc=$?
[ "$rc" = 2 ] && grep -q "figures of different GPUs are not compared" "$T/err" || fail "two GPUs: exit $rc, $(cat "$T/err")"
printf '{"who": "ours"\n' >"$T/bad.jsonl"
rc=0; compare "$T/bad.jsonl" "$T/h100.jsonl" || rc=$?
[ "$rc" = 2 ] && [ "$(cat "$T/err")" = "speed-report: $T/bad.jsonl:1: not a JSON line" ] || fail "bad file: exit $rc, $(cat "$T/err")"
rc=0; compare "$T/out/ab-before.jsonl" || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] || fail "one file: exit $rc, $(cat "$T/err")"

# A before tree whose arm table names the arms otherwise (as trees did before the recipes' names):
# refused, one line, before anything is built.
mkdir -p "$T/old" && cp -r "$T/tree/." "$T/old/"
cat >"$T/old/scripts/bench_arms.py" <<'PYEOF'
import sys
print("bench_arms: unknown arm 'FDW+H16' (known: bf16, mxfp4+h16)", file=sys.stderr)
sys.exit(2)
PYEOF
tar -czf "$T/old.tar.gz" -C "$T/old" .
rc=0
ab "$T/old.tar.gz" "$T/data" --only llama-125m >"$T/old.txt" 2>"$T/old.err" || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$T/old.err")" = 1 ] && grep -q "the before tree does not know the arms bf16,FDW+H16" "$T/old.err" ||
  fail "a before tree with other arm names: exit $rc, $(cat "$T/old.err")"

# The same trainer in both trees: refused before anything runs.
cp "$T/tree/build-gpu/bin/mxablate-train" "$T/after/bin/mxablate-train"
rc=0
ab "$T/before.tar.gz" "$T/data" --only llama-125m >"$T/same.txt" 2>"$T/same.err" || rc=$?
[ "$rc" = 2 ] || fail "identical trainers: exit $rc, wanted 2"
[ "$(cat "$T/same.err")" = "gpu-ab-bench: the two trees built the same mxablate-train: nothing to compare" ] ||
  fail "identical trainers said: $(cat "$T/same.err")"

echo "ab_bench_fake_test: passed"
