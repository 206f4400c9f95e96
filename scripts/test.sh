#!/usr/bin/env bash
# The README's test command: set up (idempotent) with the test tools, build everything (the
# tests, the fuzz targets, the GPU compile checks), run every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
ctest --test-dir "${MXABLATE_BUILD_DIR:-build}" --output-on-failure -j "${MXABLATE_JOBS:-2}" \
  --timeout 900
