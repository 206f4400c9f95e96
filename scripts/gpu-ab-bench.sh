#!/usr/bin/env bash
# Before against after, in one device call on one GPU: the tree in BEFORE_ARCHIVE (made here, e.g.
# `git archive REV -o .carry/ab/before.tar.gz`, carried) and this working tree. Each tree is built
# by its own scripts/gpu-trainer-lib.sh (build_trainer: what its bench needs) in its own build
# directory, the two trainers must differ (two identical binaries would compare a tree with
# itself; refused), both trees must know the arms by the same names (a tree from before the
# bench took the recipes' arm names does not: refused, one line), then for each model the trees run
# scripts/gpu-speed-bench.sh in turn, before first, and scripts/speed-report.py --compare prints the table:
# tokens/s of each arm in each tree, after ÷ before, and each tree's step ÷ its own BF16 step.
#
# Usage: scripts/gpu-ab-bench.sh BEFORE_ARCHIVE DATA_DIR --only MODEL[,MODEL…] [--arms LIST]
#   --only   the models (llama_shapes.py's bench names), each one bench call per tree
#   --arms   our arms, comma-separated, scripts/bench_arms.py's names (default bf16,FDW+H16)
#   Env: MXABLATE_AB_DIR (default /tmp/mxablate-ab: the before tree, the runs), OUT (default
#        $MXABLATE_AB_DIR/out: build logs, the two results files), MXABLATE_GPU_BUILD_DIR (this
#        tree's build directory, default build-gpu), and gpu-speed-bench.sh's others.
# Bad arguments: one line, exit 2.
set -euo pipefail
cd "$(dirname "$0")/.."
USAGE="usage: gpu-ab-bench.sh BEFORE_ARCHIVE DATA_DIR --only MODEL[,MODEL…] [--arms LIST]"
[ $# -ge 2 ] && [[ $1 != --* ]] && [[ $2 != --* ]] || { echo "$USAGE" >&2; exit 2; }
ARCHIVE=$1 DATA=$2
shift 2
ONLY="" ARMS=bf16,FDW+H16
while [ $# -gt 0 ]; do
  case $1 in
    --only) [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu-ab-bench: --only needs a value" >&2; exit 2; }; ONLY=$2; shift ;;
    --arms) [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu-ab-bench: a value must follow --arms" >&2; exit 2; }; ARMS=$2; shift ;;
    *) echo "gpu-ab-bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$ONLY" ] || { echo "gpu-ab-bench: --only is required (one bench call per model and tree)" >&2; exit 2; }
[ -f "$ARCHIVE" ] || { echo "gpu-ab-bench: $ARCHIVE is not a file" >&2; exit 2; }
[ -f "$DATA/manifest.json" ] || { echo "gpu-ab-bench: $DATA is not a prepared data directory" >&2; exit 2; }
source scripts/gpu-trainer-lib.sh  # gpu-env.sh, and build_trainer
MODELS=$($PY scripts/llama_shapes.py bench "$ONLY" | cut -d' ' -f1) || exit 2
$PY scripts/bench_arms.py check "$ARMS" >/dev/null || exit 2
ARCHIVE=$(realpath "$ARCHIVE") DATA=$(realpath "$DATA")

AB=${MXABLATE_AB_DIR:-/tmp/mxablate-ab}
OUT=${OUT:-$AB/out}
AFTER_BUILD=$(realpath -m "${MXABLATE_GPU_BUILD_DIR:-build-gpu}")
BEFORE=$AB/before
rm -rf "$BEFORE" "$AB/runs-before" "$AB/runs-after" && mkdir -p "$BEFORE" "$OUT"
tar -xzf "$ARCHIVE" -C "$BEFORE" 2>/dev/null || { echo "gpu-ab-bench: $ARCHIVE is not a .tar.gz" >&2; exit 2; }
[ -f "$BEFORE/scripts/gpu-speed-bench.sh" ] && [ -f "$BEFORE/scripts/gpu-env.sh" ] ||
  { echo "gpu-ab-bench: $ARCHIVE holds no tree of this project (no scripts/gpu-speed-bench.sh)" >&2; exit 2; }
if ! err=$(cd "$BEFORE" && $PY scripts/bench_arms.py check "$ARMS" 2>&1 >/dev/null); then
  echo "gpu-ab-bench: the before tree does not know the arms $ARMS ($(head -1 <<<"$err")): give arms both trees name alike" >&2
  exit 2
fi
# The carried packages are this tree's; the before tree unpacks them from the same place.
[ -e "$BEFORE/.carry" ] || [ ! -d .carry ] || ln -s "$ROOT/.carry" "$BEFORE/.carry"
rm -f "$OUT/ab-before.jsonl" "$OUT/ab-after.jsonl"

# Each tree built by its own gpu-trainer-lib.sh (gpu-env.sh builds the sourcing tree), at once.
( build_trainer "$AFTER_BUILD" "$OUT/build-after" ) & after_pid=$!
( cd "$BEFORE" && bash -c 'source scripts/gpu-trainer-lib.sh && build_trainer "$1" "$2"' _ \
    "$BEFORE/build-gpu" "$OUT/build-before" ) & before_pid=$!
rc_after=0 rc_before=0
wait $after_pid || rc_after=$?
wait $before_pid || rc_before=$?
[ $rc_after = 0 ] || { echo "gpu-ab-bench: building this tree failed (exit $rc_after; $OUT/build-after.build.log)" >&2; exit 1; }
[ $rc_before = 0 ] || { echo "gpu-ab-bench: building the before tree failed (exit $rc_before; $OUT/build-before.build.log)" >&2; exit 1; }
if cmp -s "$BEFORE/build-gpu/bin/mxablate-train" "$AFTER_BUILD/bin/mxablate-train"; then
  echo "gpu-ab-bench: the two trees built the same mxablate-train: nothing to compare" >&2
  exit 2
fi

for model in $MODELS; do
  for tree in before after; do
    dir=$ROOT build=$AFTER_BUILD
    [ $tree = before ] && dir=$BEFORE build=$BEFORE/build-gpu
    echo "== $tree: $model"
    rc=0
    ( cd "$dir" && MXABLATE_GPU_BUILD_DIR="$build" MXABLATE_BENCH_OUT="$AB/runs-$tree" \
        bash scripts/gpu-speed-bench.sh "$DATA" --only "$model" --arms "$ARMS" --no-peer --no-baselines \
        --results "$OUT/ab-$tree.jsonl" >"$OUT/bench-$tree-$model.log" 2>&1 ) || rc=$?
    [ $rc = 0 ] || echo "  gpu-speed-bench exited $rc: $(tail -1 "$OUT/bench-$tree-$model.log")"
    grep -E "^    ours-.*tokens/s" "$OUT/bench-$tree-$model.log" || true
  done
done
echo "== after against before"
$PY scripts/speed-report.py --compare "$OUT/ab-before.jsonl" "$OUT/ab-after.jsonl"
