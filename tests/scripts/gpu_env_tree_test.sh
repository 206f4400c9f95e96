#!/usr/bin/env bash
# scripts/gpu-env.sh builds ROOT, the tree whose gpu-env.sh was sourced. A before/after comparison
# that sourced one tree's gpu-env.sh and called gpu_configure from inside the other tree got the
# first tree's sources built twice (a session measured two "before" trees that were the "after"
# tree). Checks that gpu_configure and gpu_build refuse that with one line, refuse a build
# directory configured from another source tree, and still go on inside their own tree (to the
# torch lookup, which a fake python makes fail here, on the GPU machine too: no GPU needed); what
# gpu_build asks of cmake (only the missing targets, or the whole tree going on past failures);
# gpu_count against a fake nvidia-smi; and that no other GPU script builds or counts GPUs itself.
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
# gpu_build asks cmake (a fake that records its arguments) for the missing targets only, for
# nothing when all are there, and for the whole tree, going on past failures, when given none.
mkdir -p "$T/build-a/bin" && printf 'CMAKE_HOME_DIRECTORY:INTERNAL=%s\nCMAKE_GENERATOR:INTERNAL=Ninja\n' "$T/a" >"$T/build-a/CMakeCache.txt"
touch "$T/build-a/bin/mxablate" && chmod +x "$T/build-a/bin/mxablate"
printf '#!/bin/sh\necho "$*" >>"%s/cmake.args"\n' "$T" >"$T/bin/cmake" && chmod +x "$T/bin/cmake"
built() { rm -f "$T/cmake.args"; PATH="$T/bin:$PATH" MXABLATE_JOBS=3 run "$T/a" gpu_build "$T/build-a" "$T/log" "$@" >/dev/null || fail "gpu_build $*"; cat "$T/cmake.args" 2>/dev/null; }
[ "$(built mxablate mxablate-train)" = "--build $T/build-a -j 3 --target mxablate-train" ] || fail "missing target: $(built mxablate mxablate-train)"
[ -z "$(built mxablate)" ] || fail "a built target was rebuilt"
[ "$(built)" = "--build $T/build-a -j 3 -- -k 0" ] || fail "the whole tree: $(built)"

# gpu_count: the GPUs nvidia-smi lists, 0 where it fails or is missing.
count() { MXABLATE_NVIDIA_SMI="$1/nvidia-smi" bash -c 'source "$0/scripts/gpu-env.sh" && gpu_count' "$T/a"; }
mkdir -p "$T/smi3" "$T/smi-fails" "$T/no-smi"
printf '#!/bin/sh\nfor i in 0 1 2; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; done\n' >"$T/smi3/nvidia-smi"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' >"$T/smi-fails/nvidia-smi"
chmod +x "$T/smi3/nvidia-smi" "$T/smi-fails/nvidia-smi"
[ "$(count "$T/smi3")" = 3 ] || fail "gpu_count with 3 GPUs: $(count "$T/smi3")"
[ "$(count "$T/smi-fails")" = 0 ] || fail "gpu_count where nvidia-smi fails: $(count "$T/smi-fails")"
[ "$(count "$T/no-smi")" = 0 ] || fail "gpu_count without nvidia-smi: $(count "$T/no-smi")"

# Every GPU script builds and counts GPUs through gpu-env.sh: none calls cmake --build or lists
# GPUs with nvidia-smi itself.
for f in "$REPO"/scripts/gpu-*.sh "$REPO"/scripts/bench-paper-grid.sh; do
  [ "$(basename "$f")" = gpu-env.sh ] && continue
  bad=$(grep -nE 'cmake --build|nvidia-smi -L|query-gpu=index|nvidia-smi[^|]*\| *wc -l' "$f" | grep -v '^[0-9]*: *#') &&
    fail "$(basename "$f") builds or counts GPUs itself: $bad"
  grep -q 'gpu-env.sh\|gpu-trainer-lib.sh' "$f" || fail "$(basename "$f") does not source gpu-env.sh"
done
# Carried packages unpack where MXABLATE_CARRY_PREFIX says (the tests that run GPU scripts on the
# dev machine set it), never into the tree, whose .carry the next device call would carry.
if command -v dpkg-deb >/dev/null; then
  mkdir -p "$T/pkg/DEBIAN" "$T/pkg/usr/lib/x86_64-linux-gnu/pkgconfig" "$T/a/.carry/debs"
  printf 'Package: mxablate-fake\nVersion: 1\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n' \
    >"$T/pkg/DEBIAN/control"
  printf 'prefix=/usr\n' >"$T/pkg/usr/lib/x86_64-linux-gnu/pkgconfig/fake.pc"
  dpkg-deb --build "$T/pkg" "$T/a/.carry/debs/fake.deb" >/dev/null || fail "dpkg-deb could not build the fake package"
  (cd "$T/a" && MXABLATE_CARRY_PREFIX="$T/unpacked" bash -c 'source scripts/gpu-env.sh')
  [ -f "$T/unpacked/.unpacked" ] || fail "the carried packages were not unpacked into MXABLATE_CARRY_PREFIX"
  [ ! -e "$T/a/.carry/prefix" ] || fail "the carried packages were unpacked into the tree"
  grep -qx "prefix=$T/unpacked/usr" "$T/unpacked/usr/lib/x86_64-linux-gnu/pkgconfig/fake.pc" ||
    fail "the unpacked pkg-config file does not point at MXABLATE_CARRY_PREFIX"
fi
echo "gpu_env_tree_test: ok"
