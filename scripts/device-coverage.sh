#!/usr/bin/env bash
# Runs on the GPU machine: what issues 47 and 48 added, on CUDA. Hand-written softmax attention
# (its roles S and P through the device checks, no host sync, its captures replayed on the GPU),
# a collective of CUDA tensors carrying a NaN from a rank that was not recorded, and the GPU suite
# around them; then one hand-written run by hand for the note: diffusers' AttnProcessor in float16,
# whose baddbmm scores overflow (the SD-2 story); and issue 50's trend on the GPU: the float16
# nanoGPT-style model whose logits grow until its scores overflow, warned before its NaN with no
# host sync, and the cuDNN demo's trend from LSE. Logs go to $OUT.
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
run="$out/trend-growth"
nanprov run --out "$run" -- python3 tests/e2e/scripts/logit_growth.py --device cuda --steps 30 --oracle >"$run.log" 2>&1
echo "== logit growth on CUDA: run exit $?"
grep -E "nanprov: warning|oracle" "$run.log"
nanprov report "$run" | grep -E "first non-finite edge|trend warning|attention logits"
nanprov sql "$run" "SELECT key, value FROM meta WHERE key IN ('host_syncs')"
run="$out/trend-demo"
nanprov run --out "$run" -- python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 --seq 64 --d-model 256 \
  --heads 2 --steps 20 >"$run.log" 2>&1
echo "== demo on CUDA, 20 steps: run exit $?, warnings: $(grep -c 'nanprov: warning' "$run.log")"
nanprov sql "$run" "SELECT layer, step, logit, logit_source, scores_dtype, max_o, max_dq FROM trends WHERE step % 8 = 0"
