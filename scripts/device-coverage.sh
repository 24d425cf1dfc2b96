#!/usr/bin/env bash
# Runs on the GPU machine: what issues 47 and 48 added, on CUDA. Hand-written softmax attention
# (its roles S and P through the device checks, no host sync, its captures replayed on the GPU),
# a collective of CUDA tensors carrying a NaN from a rank that was not recorded, and the GPU suite
# around them; then one hand-written run by hand for the note: diffusers' AttnProcessor in float16,
# whose baddbmm scores overflow (the SD-2 story). Logs go to $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
(cd build-device && ctest -j 8 --timeout 450 --output-on-failure \
  -R "^Gpu|GraphCheck|HealthCheck|GraphedTraining|TensorHealth|TrailGpu|HandwrittenAttention|PlainSoftmax|StoreBudget" \
  >"$out/ctest-coverage.log" 2>&1)
grep -E "tests passed|\*\*\*|Failed|Passed" "$out/ctest-coverage.log" | tail -40
run="$out/hw-unet-half"
nanprov run --out "$run" -- python3 tests/e2e/scripts/handwritten_kinds.py --model unet --dtype float16 --device cuda \
  --glitch-step 2 --oracle >"$run.log" 2>&1
echo "== hand-written unet float16 on CUDA: run exit $?"
grep -E "oracle|first non-finite" "$run.log"
nanprov report "$run" | head -16
nanprov sql "$run" "SELECT key, value FROM meta WHERE key IN ('host_syncs','probe_cost','calls_written')"
nanprov replay "$run" | head -18
