#!/usr/bin/env bash
# Runs on the GPU machine: builds once, then runs the given device scripts side by side on that
# build (the GPU has room for all of them), each logging into its own folder under $OUT, and
# prints their outputs in order. Example: scripts/device-round.sh device-graphs.sh device-ffpa.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
cat "$out/gpu.txt"
export NANPROV_DEVICE_BUILT=1
all="$out"
for script in "$@"; do
  name="${script%.sh}"
  mkdir -p "$all/$name"
  (OUT="$all/$name" bash "$root/scripts/$script" >"$all/$name.txt" 2>&1; echo "exit $?" >>"$all/$name.txt") &
done
wait
for script in "$@"; do
  echo "===== ${script}"
  tail -c "${NANPROV_ROUND_TAIL:-5500}" "$all/${script%.sh}.txt"
done
