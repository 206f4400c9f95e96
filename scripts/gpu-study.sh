#!/usr/bin/env bash
# On the GPU machine (the device tool): the scale study (recipes/scale-study.yaml,
# docs/results.md), one call at a time, each ending before the call's limit and the next one
# continuing the sweep.
#
#   scripts/gpu-study.sh [--deadline-s S] [--per-gpu N] [--gpus LIST] [--recipe FILE]
#
# Carry `.carry`: debs/ (SQLite, Boost, SentencePiece: what the image lacks) and study-text/
# (the large corpus's sample as NAME.jsonl.xz, its tokenizer.model and the manifest.json that
# `data prepare` wrote from the same files on the CPU machine: scripts/build-corpus.sh --large).
# A warm machine keeps the build, the prepared data and the sweep (runs/, the database); on a
# cold one, .carry/study.db (the database a previous call brought back) is put in place first,
# so finished runs stay finished.
#
# Each call: build mxablate and mxablate-train once; prepare data/study from the carried text
# with the carried tokenizer and the carried manifest's options, then check every shard's
# SHA-256 and token count against that manifest (the GPU machine must tokenize the same text
# into the same bytes); run the sweep until the deadline (SIGTERM: the trainers publish a
# checkpoint and stop; the next call resumes them); copy the database, status, table and the
# runs' event logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/build-gpu/out}
BUILD=${MXABLATE_GPU_BUILD_DIR:-$ROOT/build-gpu}
DEADLINE=540 PER_GPU=2 GPUS=auto RECIPE=recipes/scale-study.yaml
while [ $# -gt 0 ]; do
  case $1 in
    --deadline-s) DEADLINE=$2; shift ;;
    --per-gpu) PER_GPU=$2; shift ;;
    --gpus) GPUS=$2; shift ;;
    --recipe) RECIPE=$2; shift ;;
    *) echo "gpu-study: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
T0=$SECONDS
source scripts/gpu-env.sh  # PY, the carried packages, configure, NCCL settings
nvidia-smi -L >"$OUT/gpus.txt" 2>&1
[ "$GPUS" = auto ] && GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
echo "gpu-study: GPUs $GPUS ($(head -1 "$OUT/gpus.txt"))"

# --- build (as every GPU script configures it: scripts/gpu-env.sh) ----------------------------
gpu_build "$BUILD" "$OUT/build" mxablate-train mxablate || exit 1
MX=$BUILD/bin/mxablate
"$MX" data prepare --help >/dev/null 2>&1 || { echo "gpu-study: $MX has no 'data prepare' (SentencePiece not found: is libsentencepiece-dev in .carry/debs?)"; exit 1; }
echo "gpu-study: built at $((SECONDS - T0)) s"

# --- data: the carried sample, tokenized here, checked against the CPU machine's manifest -----
TEXT=.carry/study-text
DATA=data/study
if [ ! -f "$DATA/manifest.json" ]; then
  [ -f "$TEXT/manifest.json" ] && [ -f "$TEXT/tokenizer.model" ] ||
    { echo "gpu-study: $TEXT/manifest.json and tokenizer.model are needed (scripts/build-corpus.sh --large, then copy)"; exit 2; }
  rm -rf data/study-text && mkdir -p data/study-text
  for f in "$TEXT"/*.jsonl.xz; do xz -dc "$f" >"data/study-text/$(basename "$f" .xz)" || exit 1; done
  # The options the CPU machine used, from its manifest (one record of them, not a second copy).
  read -r VAL SEED SHARD <<<"$($PY -c 'import json,sys; o=json.load(open(sys.argv[1]))["options"]; print(o["val_fraction"], o["split_seed"], o["shard_tokens"])' "$TEXT/manifest.json")"
  "$MX" data prepare --input data/study-text --tokenizer "$TEXT/tokenizer.model" --out "$DATA" --force \
    --val-fraction "$VAL" --split-seed "$SEED" --shard-tokens "$SHARD" >"$OUT/prepare.log" 2>&1 ||
    { tail -5 "$OUT/prepare.log"; exit 1; }
  $PY - "$TEXT/manifest.json" "$DATA/manifest.json" <<'PYEOF' || exit 1
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
for split in ("train", "validation"):
    a, b = cpu["splits"][split], gpu["splits"][split]
    fa = [(s["file"], s["tokens"], s["sha256"]) for s in a["shards"]]
    fb = [(s["file"], s["tokens"], s["sha256"]) for s in b["shards"]]
    if (a["tokens"], a["documents"], fa) != (b["tokens"], b["documents"], fb):
        sys.exit(f"gpu-study: the {split} split differs from the CPU machine's: {a['tokens']} vs {b['tokens']} tokens")
print(f"gpu-study: data/study has the CPU machine's shards bit for bit: {cpu['splits']['train']['tokens']} train, {cpu['splits']['validation']['tokens']} validation tokens")
PYEOF
fi
tail -1 "$OUT/prepare.log" 2>/dev/null
echo "gpu-study: data ready at $((SECONDS - T0)) s"

# --- the sweep, until the deadline ------------------------------------------------------------
DB=runs/study.db
mkdir -p runs
[ -f "$DB" ] || { [ -f .carry/study.db ] && cp .carry/study.db "$DB" && echo "gpu-study: took the carried database"; }
LEFT=$((DEADLINE - (SECONDS - T0)))
echo "gpu-study: sweep for at most $LEFT s (per GPU $PER_GPU)"
timeout --signal=TERM --kill-after=100 "$LEFT" \
  "$MX" run "$RECIPE" --db "$DB" --runs-dir runs --gpus "$GPUS" --per-gpu "$PER_GPU" --progress plain \
  >>"$OUT/run.log" 2>&1
echo "gpu-study: run exit $? at $((SECONDS - T0)) s"
tail -5 "$OUT/run.log"

# --- what comes back --------------------------------------------------------------------------
"$MX" status --db "$DB" >"$OUT/status.txt" 2>&1
"$MX" table --db "$DB" >"$OUT/table.md" 2>&1
sqlite3 "$DB" ".backup '$OUT/study.db'" 2>/dev/null || $PY -c 'import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)' "$DB" "$OUT/study.db"
mkdir -p "$OUT/logs"
for d in runs/*/*/; do
  id=$(basename "$d")
  for f in "$d"events.jsonl "$d"config.json; do [ -f "$f" ] && cp "$f" "$OUT/logs/$id.$(basename "$f")"; done
done
head -40 "$OUT/status.txt"
echo "gpu-study: done at $((SECONDS - T0)) s"
