#!/usr/bin/env bash
# Runs on the GPU machine: deferred checks (probes/libtorch/device_checks.h, NANPROV_DEFER_CHECKS=1)
# for real. The GPU end-to-end suite with every CUDA call's check deferred and batched, then the
# seed-004 cuDNN edge and a clean run each with and without deferring: the same first edge, losses
# bit-identical, and what deferring did (meta deferred_checks, probe_cost). Its speed is
# bench/gpu_overhead.sh's `deferred` configuration. Logs go to $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
(cd build-device && NANPROV_DEFER_CHECKS=1 ctest -j 6 -R "^Gpu|TrailGpu|ForeignAttention.Compiled" --timeout 500 \
  --output-on-failure >"$out/ctest-deferred.log" 2>&1)
echo "== GPU suite, NANPROV_DEFER_CHECKS=1"
grep -E "tests passed|\*\*\*|Failed|Passed" "$out/ctest-deferred.log" | tail -30
train=(python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2 --steps 4
       --print-losses)
meta="SELECT key, value FROM meta WHERE key IN ('deferred_checks','probe_cost','host_syncs')"
for defer in 0 1; do
  for kind in "--mask-rows" ""; do
    tag="defer$defer${kind:+-rows}"
    NANPROV_DEFER_CHECKS=$defer nanprov run --out "$out/$tag" -- "${train[@]}" $kind >"$out/$tag.log" 2>&1
    echo "== NANPROV_DEFER_CHECKS=$defer ${kind:-clean}: run exit $?"
    nanprov report "$out/$tag" | head -3
    nanprov calls "$out/$tag" --nonfinite | head -4
    nanprov sql "$out/$tag" "$meta"
    nanprov sql "$out/$tag" "SELECT COUNT(*) AS calls, SUM(modified) AS modified FROM calls"
  done
done
"${train[@]}" >"$out/plain.log" 2>&1
same() { cmp -s <(grep ' loss ' "$1") <(grep ' loss ' "$2") && echo yes || echo NO; }
echo "== losses identical: plain/defer0 $(same "$out/plain.log" "$out/defer0.log")," \
  "plain/defer1 $(same "$out/plain.log" "$out/defer1.log")"
