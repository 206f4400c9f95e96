#!/usr/bin/env bash
# Times the README's first command (setup + the main job) the way a newcomer meets it: in a
# fresh clone of the current commit, with no build and no corpus. Prints the time of every phase
# (setup's own lines) and the total. Packages already installed on this machine are not
# reinstalled: on a fresh machine add the "installing packages" phase (about 1–2 min on Debian's
# mirrors; docs/performance.md has the measured figure).
#
#   scripts/time-first-command.sh [DIR]     clone into DIR (default: a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d /tmp/mxablate-first-command.XXXXXX)}
git clone -q . "$dir/mxablate"
cd "$dir/mxablate"
echo "time-first-command: fresh clone of $(git rev-parse --short HEAD) in $dir/mxablate on $(nproc) cores"
start=$(date +%s)
bash scripts/setup.sh
setup_end=$(date +%s)
bash scripts/smoke-sweep.sh | tee "$dir/smoke-sweep.out"
end=$(date +%s)
echo "time-first-command: setup $((setup_end - start)) s, main job $((end - setup_end)) s," \
     "total $((end - start)) s ($(( (end - start) / 60 )) min $(( (end - start) % 60 )) s)"
