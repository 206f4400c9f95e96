#!/usr/bin/env bash
# The README's main job: the paper's ablation arms × 2 seeds on the CPU-smoke model and the
# default corpus, two runs at a time (one thread each: on two cores, two small runs side by side
# beat one run with two threads), then the table. Re-running it continues where it stopped.
#
#   scripts/smoke-sweep.sh [RECIPE]     default recipes/smoke.yaml; results in runs/mxablate.db
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MXABLATE_BUILD_DIR:-build}/bin
RECIPE=${1:-recipes/smoke.yaml}
DB=runs/mxablate.db
mkdir -p runs
"$BIN/mxablate" run "$RECIPE" --cpu 2 --db "$DB" --runs-dir runs
echo
"$BIN/mxablate" table --db "$DB"
