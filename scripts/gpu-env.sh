# Sourced by every script that runs on the GPU machine (the device tool): the one place that
# says which python has torch, where the carried packages go, which GPU architecture we build
# for, how the project is configured there, and what NCCL must not do.
#
# After sourcing: ROOT (the repository root), PY (the python with torch: MXABLATE_GPU_PYTHON when
# set, else the image's venv, else python3), PREFIX (the carried
# packages, unpacked), the compiler/loader paths exported, and the functions every GPU script
# uses (none builds or counts GPUs another way; tests/scripts/gpu_env_tree_test.sh checks):
#   gpu_count                                   prints how many GPUs are visible (0: none)
#   gpu_configure BUILD_DIR LOG [CMAKE-ARGS…]   configure BUILD_DIR as every GPU script does
#   gpu_build BUILD_DIR LOG [TARGET…]           configure if needed, then build the targets (one
#                                               that is already built is not rebuilt), or with
#                                               none the whole tree, going on past failures;
#                                               MXABLATE_JOBS parallel jobs (default nproc)
# the last two of ROOT's sources, refused (one line, return 1) when called from inside another
# tree of the project or on a build directory configured from another source tree (gpu_same_tree).
#
# What the image lacks travels in .carry/debs (scripts/gpu-check.sh's header lists them). The
# carry is copied afresh on every call while a warm machine keeps its build directories, so the
# packages are unpacked on every source, not only when something is built: a binary built by an
# earlier call still needs the carried libraries (SentencePiece, Boost) to load.
[ -n "${_MXABLATE_GPU_ENV:-}" ] && return 0  # once per shell (not exported: a child sources it again)
_MXABLATE_GPU_ENV=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${MXABLATE_GPU_PYTHON:-}" ]; then
  PY=$MXABLATE_GPU_PYTHON
elif [ -x /opt/torch/.venv/bin/python3 ]; then
  PY=/opt/torch/.venv/bin/python3
else
  PY=python3
fi

# Where they are unpacked: MXABLATE_CARRY_PREFIX, else beside them. The tests that run the GPU
# scripts on the dev machine point it at a temporary directory: unpacked here, the prefix would
# be carried with .carry on the next call, without the image's Boost helper beside it.
PREFIX=${MXABLATE_CARRY_PREFIX:-$ROOT/.carry/prefix}
MULTIARCH=$PREFIX/usr/lib/x86_64-linux-gnu
if compgen -G "$ROOT/.carry/debs/*.deb" >/dev/null && [ ! -f "$PREFIX/.unpacked" ]; then
  mkdir -p "$PREFIX"
  for deb in "$ROOT"/.carry/debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
  # Their pkg-config files say prefix=/usr; point them at where they were unpacked.
  sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" "$MULTIARCH"/pkgconfig/*.pc 2>/dev/null || true
  # Carried Boost component configs include a helper from the image's Boost, beside them.
  cp -n /usr/lib/x86_64-linux-gnu/cmake/BoostDetectToolset-*.cmake "$MULTIARCH/cmake/" 2>/dev/null || true
  touch "$PREFIX/.unpacked"
fi
export PKG_CONFIG_PATH=$MULTIARCH/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$MULTIARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CPATH=$PREFIX/usr/include${CPATH:+:$CPATH}
# LibTorch's CMake would otherwise add flags for many GPUs; Hopper is what the machine has.
export TORCH_CUDA_ARCH_LIST=9.0
# NVLink multicast off (the machine's notes say why), also for the trainers a sweep starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# The functions build ROOT, the tree whose gpu-env.sh was sourced, whatever the caller's directory.
# A caller inside another tree of this project (a before/after comparison's second tree) would get
# ROOT's sources built there and compare a tree with itself; such a caller, or a build directory
# configured from another source tree, is refused with one line (return 1).
gpu_same_tree() {
  local build_dir=$1 here="" dir=$PWD home
  # The tree the caller is in: the nearest directory up from here with a scripts/gpu-env.sh.
  while [ -n "$dir" ] && [ "$dir" != / ]; do
    if [ -f "$dir/scripts/gpu-env.sh" ]; then here=$dir; break; fi
    dir=$(dirname "$dir")
  done
  if [ -n "$here" ] && [ "$(cd "$here" && pwd -P)" != "$(cd "$ROOT" && pwd -P)" ]; then
    echo "gpu-env: called from $here, another tree than $ROOT whose gpu-env.sh was sourced; source $here/scripts/gpu-env.sh there" >&2
    return 1
  fi
  if [ -f "$build_dir/CMakeCache.txt" ]; then
    home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build_dir/CMakeCache.txt")
    if [ -n "$home" ] && [ "$(cd "$home" 2>/dev/null && pwd -P)" != "$(cd "$ROOT" && pwd -P)" ]; then
      echo "gpu-env: $build_dir was configured from $home, not $ROOT; use another build directory" >&2
      return 1
    fi
  fi
}

# nvidia-smi lists the GPUs the driver sees, one "GPU N: …" line each; it fails (or is missing)
# where there is none. MXABLATE_NVIDIA_SMI names another program (the tests' fakes: a GPU
# machine has the real one on every PATH).
gpu_count() {
  local list
  list=$("${MXABLATE_NVIDIA_SMI:-nvidia-smi}" -L 2>/dev/null) || { echo 0; return 0; }
  grep -c '^GPU ' <<<"$list" || true
}

gpu_configure() {
  local build_dir=$1 log=$2
  shift 2
  gpu_same_tree "$build_dir" || return 1
  local torch_prefix generator=()
  torch_prefix=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  local configure=(cmake -S "$ROOT" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
    -DMXABLATE_CUDA=ON -DMXABLATE_CUDA_ARCHITECTURES=90
    "-DCMAKE_PREFIX_PATH=$torch_prefix;$PREFIX/usr;$MULTIARCH/cmake"
    "-DSQLite3_INCLUDE_DIR=$PREFIX/usr/include")
  # The carried -dev packages point libsqlite3.so at Debian's runtime file; the image has its own.
  [ -f /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 ] &&
    configure+=("-DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0")
  mkdir -p "$(dirname "$log")"
  "${configure[@]}" "$@" >"$log" 2>&1 || { tail -30 "$log" >&2; return 1; }
}

# A target already in BUILD_DIR/bin is taken as built (a warm machine keeps the build directories
# of earlier calls); with no targets the whole tree is brought up to date.
gpu_build() {
  local build_dir=$1 log=$2
  shift 2
  gpu_same_tree "$build_dir" || return 1
  local missing=() t build_args=()
  for t in "$@"; do [ -x "$build_dir/bin/$t" ] || missing+=("$t"); done
  [ $# -gt 0 ] && [ ${#missing[@]} -eq 0 ] && return 0
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    gpu_configure "$build_dir" "$log.configure.log" || return 1
  fi
  if [ $# -gt 0 ]; then
    build_args=(--target "${missing[@]}")
  elif grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build_dir/CMakeCache.txt"; then
    build_args=(-- -k 0)  # the whole tree: one module's breakage must not hide the others'
  else
    build_args=(-- -k)
  fi
  cmake --build "$build_dir" -j "${MXABLATE_JOBS:-$(nproc)}" "${build_args[@]}" >"$log.build.log" 2>&1 ||
    { tail -40 "$log.build.log" >&2; return 1; }
}
