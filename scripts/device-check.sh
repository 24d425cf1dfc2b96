#!/usr/bin/env bash
# Runs on the GPU machine (see shared/GPU.md): builds nanprov against that machine's torch with
# ninja, runs the whole test suite there, then GPU end-to-end runs. Logs go to $OUT (the device
# tool's output folder) or ./device-logs. Headers that machine lacks (sqlite3.h) travel in
# .device/include, which git ignores: `mkdir -p .device/include && cp /usr/include/sqlite3.h
# .device/include/` before sending the tree.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
# NANPROV_CTEST_REGEX narrows the suite for a quick re-check (e.g. "Gpu|HealthCheck").
(cd build-device && ctest -j 8 --timeout 600 --output-on-failure ${NANPROV_CTEST_REGEX:+-R "$NANPROV_CTEST_REGEX"} \
  >"$out/ctest.log" 2>&1)
grep -E "tests passed|\*\*\*|Failed" "$out/ctest.log"

nanprov doctor --python "$py" | tee "$out/doctor.txt"
train=(python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2
       --mask-rows --steps 4)
# The seed-004 class: a bool padding mask with fully masked query rows, S=64, default dispatch.
nanprov run --out "$out/run-cudnn" -- "${train[@]}" 2>&1 | tail -15
nanprov report "$out/run-cudnn" --json >"$out/report-cudnn.json"
echo "report exit: $?"
nanprov calls "$out/run-cudnn" --nonfinite | head -8
first="$(grep -o '"name": "rank[0-9]*:layer[0-9]*:call[0-9]*"' "$out/report-cudnn.json" | head -1 | cut -d'"' -f4)"
nanprov kernels "$out/run-cudnn" --call "$first"
nanprov sql "$out/run-cudnn" "SELECT key, value FROM meta WHERE key IN ('host_syncs','kernels_attributed','cupti_dropped_records','cupti_records','kernel_tracer')"
# Training modes: the same cuDNN edge when the model is torch.compile'd and when its blocks are
# checkpointed must be named as in the eager run (step, phase, layer, module).
for mode in "--compile" "--compile max-autotune-no-cudagraphs" "--checkpoint nonreentrant" "--checkpoint reentrant"; do
  tag="$(echo "$mode" | tr -c 'a-z' '-')"
  nanprov run --out "$out/run-mode$tag" -- "${train[@]}" $mode >"$out/run-mode$tag.log" 2>&1
  echo "== $mode (report exit $(nanprov report "$out/run-mode$tag" >/dev/null; echo $?))"
  nanprov report "$out/run-mode$tag" | sed -n '1,3p'
done | tee "$out/modes.txt"
# Replay of the captured edge: root cause, verdicts, conditions; then the standalone repro script.
nanprov replay "$out/run-cudnn" --emit-repro "$out/repro-cudnn" | tee "$out/replay-cudnn.txt"
python3 "$out/repro-cudnn/repro.py"
echo "repro exit: $?"
# No false alarms: clean bf16 calls at head_dim 256 and 512, forward and backward of layer 0.
for d_model in 512 1024; do
  nanprov run --out "$out/run-clean-$d_model" --capture 'layer=0,step=0' -- python3 examples/tiny_transformer.py \
    --device cuda --dtype bfloat16 --seq 128 --heads 2 --steps 1 --d-model "$d_model" 2>&1 | tail -1
  for capture in "$out/run-clean-$d_model"/captures/*.safetensors; do
    nanprov replay "$capture" | sed -n '1,12p'
  done
done | tee "$out/replay-clean.txt"
# Control: the same run with cuDNN excluded from SDPA.
nanprov run --out "$out/run-control" -- "${train[@]}" --no-cudnn 2>&1 | tail -6
nanprov report "$out/run-control" >/dev/null
echo "control report exit: $?"
nanprov kernels "$out/run-control" | head -12
# Coexistence: the same training inside torch.profiler.
nanprov run --out "$out/run-profiler" -- "${train[@]}" --no-cudnn --profile 2>&1 | grep -E "profiler events|clean|first"
nanprov kernels "$out/run-profiler" | head -3

# Attribution: nanprov's kernels per call against torch.profiler's, over backends x head dims x GQA x masks.
cases=tests/gpu/attention_cases.py
nanprov run --out "$out/run-cases" -- python3 "$cases" --out "$out/cases.json" >"$out/cases-run.log" 2>&1
python3 "$cases" --out "$out/cases.json" --profile "$out/cases-profiler.json" >"$out/cases-profile.log" 2>&1
python3 "$cases" --out "$out/cases.json" --profile "$out/cases-profiler.json" --compare "$out/run-cases" \
  | tee "$out/attribution.txt"

if [ "${NANPROV_BENCH:-0}" = 1 ]; then
  PYTHON=python3 bench/gpu_overhead.sh "${NANPROV_BENCH_ROUNDS:-2}" "${NANPROV_BENCH_STEPS:-30}" | tee "$out/bench.txt"
fi
