#!/usr/bin/env bash
# Runs on the GPU machine: the float32 unet case of handwritten_kinds.py on CUDA, whose replay on
# the GPU disagreed with the CPU's (input-caused there, precision-limit here). Keeps the run's
# store and capture under $OUT so they can be replayed on the CPU beside the GPU's own replay.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
run="$out/hw-unet32"
nanprov run --out "$run" -- python3 tests/e2e/scripts/handwritten_kinds.py --model unet --device cuda \
  --glitch-step 2 --oracle >"$run.log" 2>&1
echo "== hand-written unet float32 on CUDA: run exit $?"
grep -E "oracle|first non-finite" "$run.log"
nanprov report "$run" | head -20
nanprov calls "$run" --nonfinite --json >"$out/unet32-calls.json"
nanprov replay "$run" --json >"$out/unet32-replay.json"; echo "replay exit $?"
nanprov replay "$run" | head -40
ls -la "$run/captures"
