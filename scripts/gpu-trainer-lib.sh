# Sourced by the GPU scripts that start trainer runs themselves (gpu-speed-bench.sh and the
# checks gpu-train-check.sh, gpu-scale-check.sh, gpu-shard-check.sh, gpu-graph-check.sh). They set
# DATA (a prepared data directory) and OUT (run directories); build_trainer sets TRAIN and
# MXABLATE.
#
# The GPU machine's environment (python, carried packages, configure, build): scripts/gpu-env.sh.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"

# build_trainer BUILD_DIR LOG_PREFIX builds what these runs need in BUILD_DIR, each unless it is
# there (gpu-env.sh's gpu_build): mxablate-train, and mxablate, whose `plan --json` writes their
# configs and whose `ingest` and `query` read their figures back (run_figures.py). Sets TRAIN and
# MXABLATE to the two binaries, MXABLATE exported for run_figures.py.
build_trainer() {
  gpu_build "$1" "$2" mxablate-train mxablate || exit 1
  TRAIN=$(realpath "$1/bin/mxablate-train")
  MXABLATE=$(realpath "$1/bin/mxablate")
  export MXABLATE
}

# config DEVICE MODEL ARM SEQ GLOBAL MICRO STEPS EVAL_EVERY_STEPS EVAL_TOKENS THREADS [EXTRA]
# prints the config of one run on $DATA: STEPS steps of GLOBAL tokens in micro-batches of MICRO,
# evaluation every EVAL_EVERY_STEPS steps on EVAL_TOKENS tokens; EXTRA is JSON merged over the
# arm's keys (e.g. '{"parallel": {"data": 2}}'). ARM is a name of scripts/bench_arms.py (the
# recipes' names: bf16, fp8, FDW, FDW+H16, and variants such as FDW+H16@quant.gemm_path=fp8).
# The one place a run config is made: bench_arms.py writes the one-run recipe and $MXABLATE plan
# --json resolves it through the contract's parser and writer, the config `mxablate run` would
# write. A bad ARM, key or value is one line on stderr and exit 2, nothing on stdout.
config() {
  $PY "$ROOT/scripts/bench_arms.py" config "$MXABLATE" "$DATA" "$@"
}

# run NAME CONFIG-ARGS…: writes $OUT/NAME/config.json (config), trains, prints one line, returns
# the trainer's exit code (or config's).
run() {
  local name=$1; shift
  local dir=$OUT/$name rc=0
  rm -rf "$dir" && mkdir -p "$dir"
  config "$@" >"$dir/config.json" 2>"$dir/output.txt" || rc=$?
  local t0=$SECONDS
  [ $rc != 0 ] || "$TRAIN" --run-dir "$dir" >"$dir/output.txt" 2>&1 || rc=$?
  echo "  $name: exit $rc in $((SECONDS - t0)) s ($(tail -1 "$dir/output.txt"))"
  return $rc
}

# summary DIR: the median tokens/s of the train events after warm-up, run_end's figure, peak GPU
# memory (scripts/run_figures.py reads them through `$MXABLATE ingest` and `query`).
summary() {
  echo "    $($PY "$ROOT/scripts/run_figures.py" summary "$1")"
}
