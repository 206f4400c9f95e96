#!/usr/bin/env bash
# scripts/gpu-env.sh builds ROOT, the tree whose gpu-env.sh was sourced. A before/after comparison
# that sourced one tree's gpu-env.sh and called gpu_configure from inside the other tree got the
# first tree's sources built twice (the second session of issue 20 measured two "before" trees that
# were the "after" tree). Checks that gpu_configure and gpu_build refuse that with one line, refuse a
# build directory configured from another source tree, and still go on inside their own tree (to
# the torch lookup, which a fake python makes fail here, on the GPU machine too: no GPU needed).
#
#   gpu_env_tree_test.sh REPO_ROOT
set -uo pipefail
REPO=$(cd "${1:?usage: gpu_env_tree_test.sh REPO_ROOT}" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for tree in a b; do mkdir -p "$T/$tree/scripts" && cp "$REPO/scripts/gpu-env.sh" "$T/$tree/scripts/"; done
mkdir -p "$T/bin" && printf '#!/bin/sh\necho "no torch here" >&2\nexit 1\n' >"$T/bin/python3" && chmod +x "$T/bin/python3"

run() {  # run DIR COMMAND…: in DIR, with tree a's gpu-env.sh sourced; prints stderr, returns rc
  (cd "$1" && shift && MXABLATE_GPU_PYTHON="$T/bin/python3" bash -c 'source "$0/scripts/gpu-env.sh" && "$@"' "$T/a" "$@") 2>&1
}

out=$(run "$T/b" gpu_configure "$T/build-x" "$T/x.log") && fail "gpu_configure from tree b built tree a: $out"
[[ $out == "gpu-env: called from $T/b, another tree than $T/a whose gpu-env.sh was sourced; source $T/b/scripts/gpu-env.sh there" ]] ||
  fail "gpu_configure from tree b said: $out"
out=$(run "$T/b/scripts" gpu_build "$T/build-x" "$T/x" mxablate-train) && fail "gpu_build from tree b/scripts went on: $out"
[[ $out == *"another tree than $T/a"* ]] || fail "gpu_build from tree b said: $out"

mkdir -p "$T/build-b" && echo "CMAKE_HOME_DIRECTORY:INTERNAL=$T/b" >"$T/build-b/CMakeCache.txt"
out=$(run "$T/a" gpu_build "$T/build-b" "$T/x" mxablate-train) && fail "gpu_build used tree b's build directory: $out"
[[ $out == "gpu-env: $T/build-b was configured from $T/b, not $T/a; use another build directory" ]] ||
  fail "gpu_build on tree b's build directory said: $out"

# In its own tree, and from a directory outside any tree, it goes on (here to the fake torch).
for dir in "$T/a" "$T"; do
  out=$(run "$dir" gpu_configure "$T/build-a" "$T/a.log") && fail "the fake python let configure pass"
  [[ $out == *"no torch here"* ]] || fail "gpu_configure from $dir stopped before the torch lookup: $out"
done
echo "gpu_env_tree_test: ok"
