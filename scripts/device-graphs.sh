#!/usr/bin/env bash
# Runs on the GPU machine: attention inside CUDA graphs (probes/libtorch/graph_checks.h). The
# graph check's kernel tests, then the tiny transformer under torch.compile(mode="reduce-overhead")
# and under make_graphed_callables with an overflow at step 4, each reported, and the GPU e2e
# tests that assert on them. Logs go to $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
(cd build-device && ctest -j 8 -R "GraphCheck|HealthCheck|GraphedTraining" --timeout 600 --output-on-failure \
  >"$out/ctest-graphs.log" 2>&1)
grep -E "tests passed|\*\*\*|Failed|Passed" "$out/ctest-graphs.log" | tail -12
train=(python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2 --steps 7
       --glitch-step 4)
for mode in "--compile reduce-overhead" "--graphed" "--graphed --no-kernels"; do
  tag="$(echo "$mode" | tr -c 'a-z' '-')"
  script_mode="${mode% --no-kernels}"
  opts=""; [ "$script_mode" != "$mode" ] && opts="--no-kernels"
  echo "== $mode"
  nanprov run --out "$out/run$tag" $opts -- "${train[@]}" $script_mode >"$out/run$tag.log" 2>&1
  echo "run exit $?"; grep -v Warning "$out/run$tag.log" | tail -6
  nanprov report "$out/run$tag" | head -24
  nanprov calls "$out/run$tag" --step 4 | head -8
  nanprov sql "$out/run$tag" "SELECT key, value FROM meta WHERE key IN ('host_syncs','probe_cost','cupti_detached') OR key LIKE 'unprobed%'"
done
