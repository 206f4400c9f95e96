#!/usr/bin/env bash
# PNG copies of a report's figures, for documents that cannot embed SVG: re-runs the gnuplot
# scripts `mxablate report` left in REPORT_DIR/plots with the pngcairo terminal at the same size.
# The scripts and data files are the report's own (names reach gnuplot only through its escaped
# data files), so the PNG shows what the page shows.
#
#   scripts/report-png.sh REPORT_DIR OUT_DIR [FIGURE ...]   e.g. extra_tokens_vs_params loss
#   (default: every figure of the report)
set -euo pipefail
[ $# -ge 2 ] || { echo "report-png: usage: report-png.sh REPORT_DIR OUT_DIR [FIGURE ...]" >&2; exit 2; }
REPORT=$1 OUT=$2
shift 2
PLOTS=$REPORT/plots
[ -d "$PLOTS" ] || { echo "report-png: $PLOTS: no such directory (run mxablate report --out $REPORT first)" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "report-png: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
FIGURES=("$@")
if [ ${#FIGURES[@]} -eq 0 ]; then
  for gp in "$PLOTS"/*.gp; do
    case $gp in *.png.gp) continue ;; esac
    FIGURES+=("$(basename "$gp" .gp)")
  done
fi
for f in "${FIGURES[@]}"; do
  [[ $f =~ ^[a-z_]+$ ]] || { echo "report-png: '$f' is not a figure name" >&2; exit 2; }
  [ -f "$PLOTS/$f.gp" ] || { echo "report-png: $PLOTS/$f.gp: no such figure" >&2; exit 2; }
  sed -e "s/^set terminal svg size \([0-9]*\),\([0-9]*\).*/set terminal pngcairo size \1,\2 noenhanced font 'sans,11' background rgb 'white'/" \
      -e "s|^set output '.*'|set output '$OUT/$f.png'|" "$PLOTS/$f.gp" >"$PLOTS/$f.png.gp"
  (cd "$PLOTS" && gnuplot "$f.png.gp") || { echo "report-png: gnuplot failed on $f" >&2; exit 1; }
  echo "$OUT/$f.png"
done
