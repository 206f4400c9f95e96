# Sourced by the GPU machine's trainer checks (gpu-train-check.sh, gpu-scale-check.sh).
# They set DATA (a prepared data directory), OUT (run directories), PY and TRAIN.
#
# The GPU machine's environment (python, carried packages, configure): scripts/gpu-env.sh.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"

# build_trainer BUILD_DIR LOG_PREFIX [PYTHON] builds mxablate-train in BUILD_DIR unless it is
# there (scripts/gpu-check.sh's build counts), configured as every GPU script is (gpu-env.sh).
build_trainer() {
  gpu_build "$1" "$2" mxablate-train || exit 1
}

# config NAME DEVICE MODEL ARM SEQ GLOBAL MICRO STEPS EVAL_EVERY_STEPS EVAL_TOKENS THREADS [EXTRA]
# prints a run config on $DATA; EXTRA is JSON merged over it (e.g. '{"parallel": {"data": 2}}').
# ARM is a name of scripts/bench_arms.py's table (bf16, fp8, mxfp4, mxfp4+h16, …), which says
# what precision and quant settings it means: the bench, the peer and the report read the same
# table, so an arm has one name everywhere. An unknown ARM is one line and exit 2.
config() {
  PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" $PY - "$@" "$DATA" <<'PYEOF'
import json, sys
from bench_arms import UnknownArm, config as arm_config
args = sys.argv[1:]
if len(args) == 12: args.insert(11, "{}")
name, device, model, arm, seq, glob, micro, steps, every, evtok, threads, extra, data = args
seq, glob, micro, steps, every, evtok, threads = map(int, (seq, glob, micro, steps, every, evtok, threads))
try:
    a = arm_config(arm)  # arm, precision and (where the arm sets any) quant
except UnknownArm as e:
    print(f"config: {e}", file=sys.stderr)
    sys.exit(2)
c = {"run_id": name, "arm": a["arm"], "model": model, "device": device, "threads": threads,
     "data": {"dataset": data, "seq_len": seq},
     "train": {"global_batch_tokens": glob, "micro_batch_tokens": micro, "max_tokens": glob * steps,
               "lr": 1e-3, "warmup_tokens": glob * max(1, steps // 10), "seed": 1},
     "eval": {"every_tokens": glob * every, "tokens": evtok},
     "precision": a["precision"],
     **({"quant": a["quant"]} if "quant" in a else {}),
     "checkpoint": {"every_steps": 0},
     "telemetry": {"train_every_steps": 1 if steps <= 50 else 10, "quant_every_steps": 0}}
def merge(base, over):
    for k, v in over.items():
        base[k] = merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return base
c = merge(c, {"train": a["train"]} if "train" in a else {})  # the arm's execution keys
print(json.dumps(merge(c, json.loads(extra)), indent=1))
PYEOF
}

# run NAME CONFIG-ARGS…: writes the config, runs, returns the exit code
run() {
  local name=$1; shift
  local dir=$OUT/$name
  rm -rf "$dir" && mkdir -p "$dir"
  config "$name" "$@" >"$dir/config.json"
  local t0=$SECONDS rc=0
  "$TRAIN" --run-dir "$dir" >"$dir/output.txt" 2>&1 || rc=$?
  echo "  $name: exit $rc in $((SECONDS - t0)) s ($(tail -1 "$dir/output.txt"))"
  return $rc
}


# summary DIR: median tokens/s of the train events after step 3, run_end's figure, peak GPU memory
summary() {
  [ -f "$1/events.jsonl" ] || { echo "    $(basename "$1"): no events"; return 0; }
  $PY - "$1" <<'PYEOF'
import json, sys, statistics
ev = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl") if l.endswith("\n")]
tps = [e["tokens_per_s"] for e in ev if e["kind"] == "train" and e["step"] > 3]
end = [e for e in ev if e["kind"] == "run_end"][-1]
print(f"    {sys.argv[1].rsplit('/', 1)[1]}: {statistics.median(tps) if tps else 0:,.0f} tokens/s | "
      f"{end['tokens_per_s']:,.0f} | peak GPU {end['peak_gpu_bytes'] / 2**30:.1f} GiB")
PYEOF
}
