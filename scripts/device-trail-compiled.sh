#!/usr/bin/env bash
# Runs on the GPU machine: the float32 hand-written unet replay (the GPU's cuBLAS overflows where
# the replay's product need not), and the trail's checks in a compiled backward on CUDA: the
# hand-written Function's backward at step 2 named as the eager hooks name it. Logs go to $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
build-device/tests/nanprov_e2e_tests --gtest_filter='Gpu.HandwrittenAttention*' 2>&1 | tail -6
python3 tests/e2e/scripts/trail_faults.py --device cuda --oracle --fault act-backward 2>&1 | grep oracle
for how in --compile --compile-blocks; do
  run="$out/trail-bwd$how"
  nanprov run --out "$run" --trail -- python3 tests/e2e/scripts/trail_faults.py --device cuda --fault act-backward $how \
    >"$run.log" 2>&1
  echo "== $how: run exit $?"; grep -E "^nanprov: --trail" "$run.log"
  nanprov report "$run" | head -1 | cut -c1-300
  nanprov sql "$run" "SELECT key, value FROM meta WHERE key IN ('host_syncs','trail_compiled_backward')"
done
