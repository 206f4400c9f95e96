#!/usr/bin/env bash
# Builds the large corpus (docs/design.md §4 "The large corpus"): the source trees and English
# prose that Debian 12's archive ships as packages (scripts/corpus/large.sources), filtered and
# deduplicated by `mxablate data collect`, a 32k-token BPE trained on a by-file sample, and every
# document tokenized by `mxablate data prepare` (validation held out by document).
#
#   scripts/build-corpus.sh --large [--force]     (or this script directly)
#
# Stages, each resumable — a stage that finished is not repeated, an interrupted one starts over
# from its own beginning and nothing half-written ever carries a finished name:
#   packages  DIR/debs/*.deb          apt-get download (or copied from $MXABLATE_CORPUS_DEBS)
#   unpack    DIR/src/NAME/           dpkg-deb -x, then the upstream archives the list names
#   collect   DIR/text/NAME.jsonl     + DIR/sample-text/ (the by-file sample); resumes per source
#   tokenizer DIR/sample/             the sample prepared, with the BPE trained on it
#   prepare   DIR/prepared/           everything, with that tokenizer; composition.md beside
#                                     manifest.json
# Environment: MXABLATE_BUILD_DIR (build), MXABLATE_LARGE_CORPUS_DIR (data/large),
# MXABLATE_CORPUS_SOURCES (scripts/corpus/large.sources), MXABLATE_CORPUS_DEBS (a directory of
# .deb files to take packages from instead of the archive), MXABLATE_CORPUS_VOCAB (32000),
# MXABLATE_CORPUS_SAMPLE (share of files in the sample, 0.07), MXABLATE_CORPUS_TOKENIZER_SENTENCES
# (20000 pieces of ≤ 4 KB), MXABLATE_CORPUS_THREADS (0: every core), MXABLATE_CORPUS_STOP_AFTER
# (a stage name: stop there, as an interruption would; for the tests).
# Exit 2: a package missing from the archive, a file that is not a Debian package, a bad line in
# the sources list. Exit 1: anything else (the log's tail is printed).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${MXABLATE_BUILD_DIR:-build}
DIR=${MXABLATE_LARGE_CORPUS_DIR:-data/large}
SOURCES=${MXABLATE_CORPUS_SOURCES:-scripts/corpus/large.sources}
LOCAL_DEBS=${MXABLATE_CORPUS_DEBS:-}
VOCAB=${MXABLATE_CORPUS_VOCAB:-32000}
SAMPLE=${MXABLATE_CORPUS_SAMPLE:-0.07}
TOKENIZER_SENTENCES=${MXABLATE_CORPUS_TOKENIZER_SENTENCES:-20000}
THREADS=${MXABLATE_CORPUS_THREADS:-0}
STOP_AFTER=${MXABLATE_CORPUS_STOP_AFTER:-}
MXABLATE=$BUILD_DIR/bin/mxablate
LOG=$DIR/build.log

FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --large) ;;
    *) echo "build-large-corpus: unknown option '$arg' (--force)" >&2; exit 2 ;;
  esac
done

bad_input() { echo "build-large-corpus: $1" >&2; exit 2; }
fail() {
  echo "build-large-corpus: $1" >&2
  [ -f "$LOG" ] && tail -n 15 "$LOG" >&2
  exit 1
}
[ -x "$MXABLATE" ] || fail "$MXABLATE not built: run scripts/setup.sh"
# The unpackers the listed archives need (.tar.xz, .tar.bz2, .zip); scripts/setup.sh installs
# them, a machine set up otherwise may lack unzip or bzip2.
for tool in dpkg-deb tar xz bzip2 unzip; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' not found: apt-get install xz-utils bzip2 unzip"
done
"$MXABLATE" data collect --help >/dev/null 2>&1 || fail "$MXABLATE has no 'data collect' (built without zlib?)"
[ -f "$SOURCES" ] || bad_input "$SOURCES: no such sources list"

if [ "$FORCE" = 1 ]; then rm -rf "$DIR"; fi
mkdir -p "$DIR/debs" "$DIR/src"
# What a killed run left half-written: a download, an unpacking (also of a source since dropped
# from the list, which nothing below would ever visit again).
rm -rf "$DIR/debs/partial" "$DIR"/src/*.partial
: >>"$LOG"
T0=$SECONDS
stage_start=$SECONDS
stage_done() {
  echo "build-large-corpus: $1 done in $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
  if [ "$STOP_AFTER" = "$1" ]; then echo "build-large-corpus: stopping after $1 (MXABLATE_CORPUS_STOP_AFTER)"; exit 3; fi
}

# The list: NAME PACKAGE [GLOB...]; comments and blank lines skipped. Names are checked by
# `data collect` too, but a bad one must fail before any download.
NAMES=() PACKAGES=() GLOBS=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  line=${line%%#*}
  read -r -a f <<<"$line" || true
  [ "${#f[@]}" -eq 0 ] && continue
  [ "${#f[@]}" -ge 2 ] || bad_input "$SOURCES:$lineno: expected NAME PACKAGE [ARCHIVE-GLOB ...]"
  [[ ${f[0]} =~ ^[a-z0-9][a-z0-9._-]{0,63}$ ]] || bad_input "$SOURCES:$lineno: bad source name '${f[0]}'"
  if [[ ${f[1]} != dir:* ]]; then
    [[ ${f[1]} =~ ^[a-z0-9][a-z0-9.+-]*$ ]] || bad_input "$SOURCES:$lineno: bad package name '${f[1]}'"
  fi
  for n in "${NAMES[@]}"; do [ "$n" = "${f[0]}" ] && bad_input "$SOURCES:$lineno: source '${f[0]}' is listed twice"; done
  NAMES+=("${f[0]}") PACKAGES+=("${f[1]}") GLOBS+=("${f[*]:2}")
done <"$SOURCES"
[ "${#NAMES[@]}" -gt 0 ] || bad_input "$SOURCES: lists no source"

# --- packages ---------------------------------------------------------------------------------
deb_of() { compgen -G "$DIR/debs/${1}_*.deb" | head -n 1; }
for i in "${!NAMES[@]}"; do
  pkg=${PACKAGES[$i]}
  [[ $pkg == dir:* ]] && continue
  deb=$(deb_of "$pkg" || true)
  if [ -n "$deb" ] && dpkg-deb --info "$deb" >/dev/null 2>&1; then continue; fi
  [ -n "$deb" ] && rm -f "$deb"  # a damaged download is fetched again
  rm -rf "$DIR/debs/partial" && mkdir -p "$DIR/debs/partial"
  if [ -n "$LOCAL_DEBS" ]; then
    found=$(compgen -G "$LOCAL_DEBS/${pkg}_*.deb" | head -n 1 || true)
    [ -n "$found" ] || { rm -rf "$DIR/debs/partial"; bad_input "package $pkg: not in $LOCAL_DEBS"; }
    cp "$found" "$DIR/debs/partial/"
  else
    (cd "$DIR/debs/partial" && apt-get download "$pkg") >>"$LOG" 2>&1 ||
      { rm -rf "$DIR/debs/partial"; bad_input "package $pkg: apt-get download failed (not in the archive? see $LOG)"; }
  fi
  deb=$(compgen -G "$DIR/debs/partial/*.deb" | head -n 1 || true)
  if [ -z "$deb" ] || ! dpkg-deb --info "$deb" >>"$LOG" 2>&1; then
    rm -rf "$DIR/debs/partial"
    bad_input "package $pkg: ${deb:-the download} is not a Debian package"
  fi
  mv "$deb" "$DIR/debs/"
  rm -rf "$DIR/debs/partial"
done
stage_done packages

# --- unpack -----------------------------------------------------------------------------------
for i in "${!NAMES[@]}"; do
  name=${NAMES[$i]} pkg=${PACKAGES[$i]}
  [[ $pkg == dir:* ]] && continue
  dest=$DIR/src/$name
  [ -d "$dest" ] && continue
  partial=$dest.partial
  rm -rf "$partial" && mkdir -p "$partial"
  deb=$(deb_of "$pkg")
  dpkg-deb -x "$deb" "$partial" >>"$LOG" 2>&1 ||
    { rm -rf "$partial"; bad_input "package $pkg: $deb cannot be unpacked"; }
  read -r -a globs <<<"${GLOBS[$i]}" || true
  for glob in "${globs[@]}"; do
    matched=0
    for archive in "$partial"/$glob; do
      [ -f "$archive" ] || continue
      matched=1
      where=$(dirname "$archive")
      case "$archive" in
        *.zip) unzip -q -o "$archive" -d "$where/$(basename "$archive" .zip)" >>"$LOG" 2>&1 ;;
        *.tar|*.tar.*) tar -xf "$archive" -C "$where" >>"$LOG" 2>&1 ;;
        *) false ;;
      esac || { rm -rf "$partial"; bad_input "package $pkg: cannot unpack ${archive#"$partial"/}"; }
      rm -f "$archive"
    done
    [ "$matched" = 1 ] || { rm -rf "$partial"; bad_input "package $pkg: holds no $glob (see $SOURCES)"; }
  done
  mv "$partial" "$dest"
done
stage_done unpack

# --- collect ----------------------------------------------------------------------------------
ARGS=()
for i in "${!NAMES[@]}"; do
  name=${NAMES[$i]} pkg=${PACKAGES[$i]}
  if [[ $pkg == dir:* ]]; then
    src=${pkg#dir:}
    # The default corpus's texts are extracted by its own script (bible, R, npm).
    if [ "$src" = "data/corpus/text" ] && [ ! -f data/corpus/text.done ]; then
      bash scripts/build-corpus.sh --text-only >>"$LOG" 2>&1 || fail "extracting the default corpus's texts failed"
    fi
    [ -d "$src" ] || bad_input "$SOURCES: source $name: $src is not a directory"
    ARGS+=(--source "$name=$src")
  else
    ARGS+=(--source "$name=$DIR/src/$name")
  fi
done
rc=0
"$MXABLATE" data collect "${ARGS[@]}" --out "$DIR/text" --sample-out "$DIR/sample-text" \
  --sample-fraction "$SAMPLE" --threads "$THREADS" 2>"$DIR/collect.err" | tee -a "$LOG" || rc=$?
cat "$DIR/collect.err" >>"$LOG"
if [ "$rc" = 2 ]; then bad_input "$(tail -n 1 "$DIR/collect.err")"; fi
[ "$rc" = 0 ] || fail "mxablate data collect failed"
rm -f "$DIR/collect.err"
stage_done collect

# --- tokenizer: the sample, prepared, with the BPE trained on it -------------------------------
PREPARE_OPTS=(--val-fraction 0.01 --split-seed 1 --threads "$THREADS")
if [ ! -f "$DIR/sample/manifest.json" ]; then
  "$MXABLATE" data prepare --input "$DIR/sample-text" --out "$DIR/sample" --force \
    --vocab-size "$VOCAB" --byte-fallback --keep-whitespace \
    --tokenizer-sentences "$TOKENIZER_SENTENCES" "${PREPARE_OPTS[@]}" >>"$LOG" 2>&1 ||
    fail "preparing the sample (and training the tokenizer) failed"
fi
grep -E '^data prepare: trained' "$LOG" | tail -1 || true
stage_done tokenizer

# --- prepare: every document, with the sample's tokenizer --------------------------------------
if [ ! -f "$DIR/prepared/manifest.json" ]; then
  "$MXABLATE" data prepare --input "$DIR/text" --out "$DIR/prepared" --force \
    --tokenizer "$DIR/sample/tokenizer.model" "${PREPARE_OPTS[@]}" >>"$LOG" 2>&1 ||
    fail "preparing the corpus failed"
fi
stage_done prepare

echo "build-large-corpus: $DIR/prepared ready in $((SECONDS - T0)) s (this run); composition:"
cat "$DIR/prepared/composition.md"
