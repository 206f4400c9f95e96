#!/usr/bin/env bash
# The README's test command: set up (idempotent), build, run every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir "${MXABLATE_BUILD_DIR:-build}" --output-on-failure -j "${MXABLATE_JOBS:-2}" \
  --timeout 900
