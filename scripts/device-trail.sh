#!/usr/bin/env bash
# Runs on the GPU machine: builds nanprov, then `nanprov run --trail` on CUDA: the trail's tests
# (the GPU one included: a bf16 model diverging at a high learning rate, its first bad module
# matched against the script's own hooks), a report of that run, and the cost of --trail beside
# plain training and the default run on the benchmark model. Logs go to $OUT or ./device-logs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
build-device/tests/nanprov_e2e_tests --gtest_filter='Trail*' 2>&1 | tee "$out/trail-tests.log" | tail -30
nanprov run --out "$out/run-trail-bf16" --trail -- python3 tests/e2e/scripts/trail_faults.py --oracle --device cuda \
  --dtype bfloat16 --d-model 64 --steps 5 --lr 1e3 >"$out/run-trail-bf16.log" 2>&1
grep oracle "$out/run-trail-bf16.log"
nanprov report "$out/run-trail-bf16" | sed -n '1,3p'
# The cost: the benchmark model, plain, under nanprov and under nanprov --trail, side by side.
if [ "${NANPROV_BENCH:-1}" = 1 ]; then
  BENCH_CONFIGS="${BENCH_CONFIGS:-none nanprov trail}" PYTHON=python3 \
    bench/gpu_overhead.sh "${NANPROV_BENCH_ROUNDS:-2}" "${NANPROV_BENCH_STEPS:-20}"
fi
