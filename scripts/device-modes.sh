#!/usr/bin/env bash
# Runs on the GPU machine: builds nanprov, then the training-mode checks alone (no test suite):
# the seed-004 cuDNN dQ edge eager, compiled and checkpointed, and whether losses stay
# bit-identical under nanprov when compiled. `NANPROV_BENCH=1` adds bench/gpu_overhead.sh with
# BENCH_CONFIGS (default: none nanprov nosentinel checks naive). Logs go to $OUT or ./device-logs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
train=(python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2
       --mask-rows --steps 4)
# Every run compiles from a cold Inductor cache of its own: a warm one, filled by another run,
# would hide a probe that changed what Dynamo and AOTAutograd traced.
cold() { TORCHINDUCTOR_CACHE_DIR="$(mktemp -d)" "$@"; }
for mode in "" "--compile" "--compile max-autotune-no-cudagraphs" "--checkpoint nonreentrant" "--checkpoint reentrant"; do
  tag="$(echo "eager $mode" | tr -c 'a-z' '-')"
  cold nanprov run --out "$out/run-$tag" -- "${train[@]}" $mode >"$out/run-$tag.log" 2>&1
  echo "== ${mode:-eager} (report exit $(nanprov report "$out/run-$tag" >/dev/null; echo $?)," \
       "$(nanprov calls "$out/run-$tag" --phase bwd --json | grep -c '"phase": "bwd"') bwd calls checked)"
  nanprov report "$out/run-$tag" | sed -n '1,3p'
done
# Bit-identical losses, compiled, on this machine's torch: plain twice (is compiled training
# itself repeatable here?), then under nanprov, without the sentinel, and without compiled paths.
ident=(python3 examples/tiny_transformer.py --steps 3 --print-losses --compile)
for how in plain plain nanprov nosentinel nopaths; do
  case $how in
    plain) cold "${ident[@]}" 2>/dev/null ;;
    nanprov) cold nanprov run --out "$out/ident-$how" -- "${ident[@]}" 2>/dev/null ;;
    nosentinel) NANPROV_SENTINEL=0 cold nanprov run --out "$out/ident-$how" -- "${ident[@]}" 2>/dev/null ;;
    nopaths) NANPROV_COMPILED_PATHS=0 cold nanprov run --out "$out/ident-$how" -- "${ident[@]}" 2>/dev/null ;;
  esac | grep "^rank" | tr '\n' ' ' | sed "s/^/$how: /"; echo
done
# The gradient sentinel on CUDA: a NaN gradient made by a regulariser outside attention.
nanprov run --out "$out/run-sentinel" -- python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 \
  --steps 5 --regulariser-nan-step 2 >/dev/null 2>&1
echo "== sentinel on cuda (report exit $(nanprov report "$out/run-sentinel" >/dev/null; echo $?))"
nanprov report "$out/run-sentinel" | sed -n '1,3p'
if [ "${NANPROV_BENCH:-0}" = 1 ]; then
  BENCH_CONFIGS="${BENCH_CONFIGS:-none nanprov nosentinel checks naive}" PYTHON=python3 \
    bench/gpu_overhead.sh "${NANPROV_BENCH_ROUNDS:-2}" "${NANPROV_BENCH_STEPS:-20}"
fi
