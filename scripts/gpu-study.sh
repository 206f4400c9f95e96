#!/usr/bin/env bash
# On the GPU machine (the device tool): the scale study (recipes/scale-study.yaml,
# docs/results.md), one call at a time, each ending before the call's limit and the next one
# continuing the sweep.
#
#   scripts/gpu-study.sh [--deadline-s S] [--per-gpu N] [--gpus LIST] [--recipe FILE]
#                        [--order plan|longest-first] [--db-name NAME]
#
# Carry `.carry/debs` (SQLite, Boost, SentencePiece: what the image lacks), `.carry/study-text`
# (the sample's text as NAME.jsonl.gz or NAME.jsonl.xz, its tokenizer.model and the
# manifest.json that `data prepare` wrote from the same files on the CPU machine:
# scripts/build-corpus.sh --large) and, from the second call on, `.carry/NAME.db.xz` (the
# database the previous call brought back; a plain .carry/NAME.db is taken too). NAME is
# --db-name (default `study`): one database per study, so two studies can share a call.
# A warm machine keeps the build, the prepared data and the sweep (runs/, the database); on a
# cold one the carried database is put in place first, so finished runs stay finished (runs
# that were stopped mid-way start over: their checkpoints stayed on the machine that went).
#
# Each call: build mxablate and mxablate-train once; prepare data/study from the carried text
# with the carried tokenizer and every option the carried manifest records, then check every
# shard's SHA-256 and token count against that manifest (the GPU machine must tokenize the same
# text into the same bytes); run the sweep, longest runs first, until S seconds after the
# script started less a reserve for stopping (SIGTERM: the trainers publish a checkpoint and
# stop within --grace, the next call resumes them); then bring back, as at most 8 files of at
# most 16 MiB (the device tool's limits), in $OUT:
#   NAME.summary.txt  GPUs, the phases' wall times, the data check, the run's exit, status, table
#   NAME.db.xz        the database (an SQLite backup, xz): the next call's .carry/NAME.db.xz
#   NAME.logs.tar.xz  every run's events.jsonl and config.json, the build, prepare and run logs
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/build-gpu/out}
BUILD=${MXABLATE_GPU_BUILD_DIR:-$ROOT/build-gpu}
DEADLINE=570 PER_GPU=2 GPUS=auto RECIPE=recipes/scale-study.yaml ORDER=longest-first DB_NAME=study
# From SIGTERM to the packed files: the trainers' stop (checkpoint) within GRACE, then mxablate's
# own wrap-up, then packing. `timeout` kills mxablate at KILL_AFTER past the SIGTERM.
GRACE=40 KILL_AFTER=50 RESERVE=75
while [ $# -gt 0 ]; do
  case $1 in
    --deadline-s) DEADLINE=$2; shift ;;
    --per-gpu) PER_GPU=$2; shift ;;
    --gpus) GPUS=$2; shift ;;
    --recipe) RECIPE=$2; shift ;;
    --order) ORDER=$2; shift ;;
    --db-name) DB_NAME=$2; shift ;;
    *) echo "gpu-study: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case $DB_NAME in
  ''|*[!A-Za-z0-9_-]*) echo "gpu-study: --db-name must be letters, digits, '_' or '-': $DB_NAME" >&2; exit 2 ;;
esac
T0=$SECONDS
mkdir -p "$OUT"
WORK=$BUILD/$DB_NAME-out  # what is packed into $OUT at the end (kept on the machine, replaced each call)
rm -rf "$WORK" && mkdir -p "$WORK"
SUMMARY=$OUT/$DB_NAME.summary.txt
: >"$SUMMARY"
say() { echo "gpu-study: $*" | tee -a "$SUMMARY"; }
phase() { say "$1 at $((SECONDS - T0)) s"; }

source scripts/gpu-env.sh  # PY, the carried packages, configure, NCCL settings
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$WORK/gpus.txt" 2>&1
cat "$WORK/gpus.txt" >>"$SUMMARY"
[ "$GPUS" = auto ] && GPUS=$(seq -s, 0 $(($(gpu_count) - 1)))
say "GPUs $GPUS, $PER_GPU per GPU, order $ORDER, deadline $DEADLINE s"

# Packs $WORK and the database into $OUT (also after a failure: whatever there is).
DB=runs/$DB_NAME.db
pack() {
  local MX=$BUILD/bin/mxablate
  if [ -f "$DB" ] && [ -x "$MX" ]; then
    "$MX" status --db "$DB" >"$WORK/status.txt" 2>&1
    "$MX" table --db "$DB" >"$WORK/table.md" 2>&1
    { echo; echo "== mxablate status"; cat "$WORK/status.txt"
      echo; echo "== mxablate table"; cat "$WORK/table.md"; } >>"$SUMMARY"
    # A consistent copy: SQLite's online backup (mxablate run has exited; a backup is safe anyway).
    rm -f "$WORK/$DB_NAME.db"
    if command -v sqlite3 >/dev/null 2>&1; then
      sqlite3 "$DB" ".backup '$WORK/$DB_NAME.db'"
    else
      $PY -c 'import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()' "$DB" "$WORK/$DB_NAME.db"
    fi
    xz -T0 -6 -c "$WORK/$DB_NAME.db" >"$OUT/$DB_NAME.db.xz" && rm -f "$WORK/$DB_NAME.db"
  fi
  mkdir -p "$WORK/logs"
  local d id f
  for d in runs/*/*/; do
    [ -d "$d" ] || continue
    id=$(basename "$d")
    for f in events.jsonl config.json; do [ -f "$d$f" ] && cp "$d$f" "$WORK/logs/$id.$f"; done
  done
  tar -C "$WORK" -cf - --exclude="$DB_NAME.db" . | xz -T0 -6 >"$OUT/$DB_NAME.logs.tar.xz"
  local big
  for big in "$OUT"/*; do
    [ "$(stat -c %s "$big")" -gt $((16 * 1024 * 1024)) ] &&
      say "WARNING: $(basename "$big") is over 16 MiB and will not come back"
  done
  phase "packed"
}

# --- build (as every GPU script configures it: scripts/gpu-env.sh) ----------------------------
gpu_build "$BUILD" "$WORK/build" mxablate-train mxablate || { pack; exit 1; }
MX=$BUILD/bin/mxablate
"$MX" data prepare --help >/dev/null 2>&1 ||
  { say "$MX has no 'data prepare' (SentencePiece not found: is libsentencepiece-dev in .carry/debs?)"; pack; exit 1; }
phase "built"

# --- data: the carried sample, tokenized here, checked against the CPU machine's manifest -----
TEXT=.carry/study-text
DATA=data/study
if [ ! -f "$DATA/manifest.json" ]; then
  [ -f "$TEXT/manifest.json" ] && [ -f "$TEXT/tokenizer.model" ] ||
    { say "$TEXT/manifest.json and tokenizer.model are needed (scripts/build-corpus.sh --large, then copy)"; pack; exit 2; }
  # The inputs, one directory (data prepare reads it in byte order of the names): .jsonl.gz as
  # carried (data prepare reads gzip), .jsonl.xz decompressed.
  rm -rf data/study-text && mkdir -p data/study-text
  n=0
  for f in "$TEXT"/*.jsonl.gz "$TEXT"/*.jsonl.xz; do
    [ -f "$f" ] || continue
    case $f in
      *.gz) ln -s "$ROOT/$f" "data/study-text/$(basename "$f")" ;;
      *.xz) xz -dc "$f" >"data/study-text/$(basename "$f" .xz)" || { say "cannot decompress $f"; pack; exit 1; } ;;
    esac
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { say "$TEXT holds no .jsonl.gz or .jsonl.xz file"; pack; exit 2; }
  # Every option the CPU machine's manifest records, as data prepare's flags (one record of
  # them, not a second copy here). Its tokenizer is the carried one; an option this list does
  # not know stops the script rather than being dropped.
  OPTS_TEXT=$($PY - "$TEXT/manifest.json" <<'PYEOF'
import json, sys
o = json.load(open(sys.argv[1]))["options"]
flags = {"vocab_size": "--vocab-size", "character_coverage": "--character-coverage",
         "byte_fallback": "--byte-fallback", "keep_whitespace": "--keep-whitespace",
         "tokenizer_max_sentences": "--tokenizer-sentences", "tokenizer_seed": "--tokenizer-seed",
         "val_fraction": "--val-fraction", "split_seed": "--split-seed",
         "shard_tokens": "--shard-tokens"}
for key, value in o.items():
    if key == "tokenizer_model":
        continue  # --tokenizer: the carried tokenizer.model
    if key not in flags:
        sys.exit(f"gpu-study: the manifest's option {key!r} has no flag here; add it to gpu-study.sh")
    if isinstance(value, bool):
        if value:
            print(flags[key])
    else:
        print(flags[key]); print(value)
PYEOF
) || { say "cannot read the options of $TEXT/manifest.json"; pack; exit 2; }
  mapfile -t OPTS <<<"$OPTS_TEXT"
  say "data prepare ${OPTS[*]}"
  "$MX" data prepare --input data/study-text --tokenizer "$TEXT/tokenizer.model" --out "$DATA" --force \
    "${OPTS[@]}" >"$WORK/prepare.log" 2>&1 ||
    { tail -5 "$WORK/prepare.log" | tee -a "$SUMMARY"; rm -rf "$DATA"; pack; exit 1; }
  if ! $PY - "$TEXT/manifest.json" "$DATA/manifest.json" >>"$SUMMARY" 2>&1 <<'PYEOF'
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
for split in ("train", "validation"):
    a, b = cpu["splits"][split], gpu["splits"][split]
    fa = [(s["file"], s["tokens"], s["sha256"]) for s in a["shards"]]
    fb = [(s["file"], s["tokens"], s["sha256"]) for s in b["shards"]]
    if (a["tokens"], a["documents"], fa) != (b["tokens"], b["documents"], fb):
        bad = next((f"{x[0]}: {x[1]} tokens {x[2][:12]} vs {y[1]} tokens {y[2][:12]}"
                    for x, y in zip(fa, fb) if x != y), f"{len(fa)} vs {len(fb)} shards")
        sys.exit(f"gpu-study: STOP: the {split} split differs from the CPU machine's "
                 f"({a['tokens']} vs {b['tokens']} tokens; {bad})")
print(f"gpu-study: data/study has the CPU machine's shards bit for bit: "
      f"{cpu['splits']['train']['tokens']} train, {cpu['splits']['validation']['tokens']} validation tokens")
PYEOF
  then
    tail -1 "$SUMMARY"
    mv "$DATA" data/study.mismatch  # never trained on; kept for a look
    pack
    exit 1
  fi
  tail -1 "$SUMMARY"
fi
phase "data ready"

# --- the sweep, until the deadline ------------------------------------------------------------
mkdir -p runs
if [ ! -f "$DB" ]; then
  if [ -f ".carry/$DB_NAME.db.xz" ]; then
    xz -dc ".carry/$DB_NAME.db.xz" >"$DB.partial" && mv "$DB.partial" "$DB" && say "took the carried database (.carry/$DB_NAME.db.xz)"
  elif [ -f ".carry/$DB_NAME.db" ]; then
    cp ".carry/$DB_NAME.db" "$DB" && say "took the carried database (.carry/$DB_NAME.db)"
  fi
fi
LEFT=$((DEADLINE - RESERVE - (SECONDS - T0)))
if [ "$LEFT" -lt 30 ]; then
  say "only $LEFT s left for the sweep: not started"
else
  say "sweep for at most $LEFT s"
  timeout --signal=TERM --kill-after="$KILL_AFTER" "$LEFT" \
    "$MX" run "$RECIPE" --db "$DB" --runs-dir runs --gpus "$GPUS" --per-gpu "$PER_GPU" \
    --order "$ORDER" --grace "${GRACE}s" --progress plain >"$WORK/run.log" 2>&1
  rc=$?
  case $rc in
    0) say "run exit 0: the sweep is finished" ;;
    143|124) say "run exit $rc: stopped at the deadline; the next call continues it" ;;
    137) say "run exit 137: mxablate was killed $KILL_AFTER s after SIGTERM (its open attempts are recovered next call)" ;;
    *) say "run exit $rc" ;;
  esac
  phase "sweep stopped"
  { echo; echo "== mxablate run (last 15 lines)"; tail -15 "$WORK/run.log"; } >>"$SUMMARY"
fi

# --- what comes back --------------------------------------------------------------------------
pack
head -60 "$SUMMARY"
