#!/usr/bin/env bash
# Runs on the GPU machine: the trail's checks in a compiled backward on CUDA: the trail's GPU tests,
# then the hand-written Function's backward at step 2, named as the eager hooks name it (the
# oracle), with the run's module checks. NANPROV_TRAIL_GRAPHS=1 also logs the post-grad graphs and
# prints the checks Inductor kept. Logs go to $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
(cd build-device && ctest --timeout 450 -R "^TrailGpu" --output-on-failure 2>&1 | grep -E "Test #|tests passed|Failure|Expected|Actual" | head -20)
python3 tests/e2e/scripts/trail_faults.py --device cuda --oracle --fault act-backward 2>&1 | grep oracle
for how in ${NANPROV_TRAIL_HOW:---compile}; do
  run="$out/trail-bwd$how"
  logs=""; [ "${NANPROV_TRAIL_GRAPHS:-0}" = 1 ] && logs=post_grad_graphs
  # Set only when asked: torch does not import with TORCH_LOGS set empty.
  env ${logs:+TORCH_LOGS=$logs} nanprov run --out "$run" --trail -- \
    python3 tests/e2e/scripts/trail_faults.py --device cuda --fault act-backward $how >"$run.log" 2>&1
  echo "== $how: run exit $?"; grep -E "^nanprov: --trail" "$run.log"
  nanprov report "$run" | head -1 | cut -c1-300
  nanprov sql "$run" "SELECT key, value FROM meta WHERE key IN ('host_syncs','trail_compiled_backward')"
  nanprov sql "$run" "SELECT step, phase, module, inputs_finite, nan, posinf, neginf, ord FROM module_checks" | head -6
  [ -z "$logs" ] || grep -o "trail_compiled_backward.default([^]]*\], \[[^]]*\])" "$run.log" | cut -c1-200
done
