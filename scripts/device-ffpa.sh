#!/usr/bin/env bash
# Runs on the GPU machine (shared/GPU.md, "FFPA on the GPU machine (seed 001)"): seed 001's shape in
# small. A Gemma4-like model (examples/gemma4_ffpa.py) whose full-attention layers (head_dim 512, GQA
# 2:1) run FFPA's Triton kernels and whose sliding-window layers (head_dim 256) run compiled
# FlexAttention, trained under `nanprov run` with an overflow in layer 3 at step 2. Prints the report,
# the first non-finite calls and the replay of the first edge's capture (through FFPA itself too),
# then a clean twin (losses bit-identical with and without nanprov, FFPA's backward replayed), then
# the GPU gtest of the same edge. About 3 minutes after the build.
#
# FFPA is not installed there and the machine has no internet: its wheel (pure Python, Triton from
# torch's wheel) travels unzipped in .device/ffpa, which git ignores. Make it on a machine with pip:
#   pip download --no-deps ffpa-attn==0.2.4 -d /tmp/ffpa-wheel
#   rm -rf .device/ffpa && python3 -m zipfile -e /tmp/ffpa-wheel/ffpa_attn-0.2.4-py3-none-any.whl .device/ffpa
# then send the tree with .device/ffpa carried, and run: scripts/device-ffpa.sh
# Logs go to $OUT (the device tool's output folder) or ./device-logs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1

if [ ! -d .device/ffpa/ffpa_attn ]; then
  echo "no .device/ffpa/ffpa_attn: unzip the ffpa-attn 0.2.4 wheel there first (see this script's header)"
  exit 1
fi
export PYTHONPATH="$root/.device/ffpa${PYTHONPATH:+:$PYTHONPATH}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/nanprov-ffpa-inductor}"
python3 -c "import ffpa_attn, torch, triton; print('ffpa_attn', ffpa_attn.__version__, ffpa_attn.__file__, \
'torch', torch.__version__, 'triton', triton.__version__)" 2>&1 | tail -1
edge() { grep -o '"name": "rank[0-9]*:layer[0-9]*:call[0-9]*"' "$1" | head -1 | cut -d'"' -f4; }

g4=(python3 examples/gemma4_ffpa.py --device cuda --dtype bfloat16 --sliding flex --compile --layers 4 --seq 1024
    --d-model 256 --heads 4 --kv-heads 2 --steps 4)
nanprov run --out "$out/ffpa" -- "${g4[@]}" --overflow-layer 3 --overflow-step 2 >"$out/ffpa.log" 2>&1
echo "== Gemma4-like, FFPA full layers (1, 3) + compiled flex sliding layers (0, 2), overflow in layer 3 at step 2" \
  "(report exit $(nanprov report "$out/ffpa" --json >"$out/ffpa.json"; echo $?))"
tail -4 "$out/ffpa.log"
nanprov report "$out/ffpa"
echo "== calls --nonfinite"
nanprov calls "$out/ffpa" --nonfinite | head
echo "== FFPA calls by phase, and every backend's calls"
nanprov sql "$out/ffpa" "SELECT backend, phase, COUNT(*) AS calls FROM calls GROUP BY backend, phase"
nanprov kernels "$out/ffpa" --call "$(edge "$out/ffpa.json")" | head -6
echo "== replay of the first edge's capture"
nanprov replay "$out/ffpa" | tee "$out/ffpa-replay.txt"

# Clean twin: same training, no overflow, layer 3's calls of step 0 captured; losses bit-identical.
# Two plain runs first: Triton's autotuning (FFPA's, compiled flex's) may pick other configs run to run,
# and then losses differ without nanprov (on 2026-12-05 nanprov's differed from one plain run's from step 1).
"${g4[@]}" --print-losses >"$out/ffpa-plain.txt" 2>&1
"${g4[@]}" --print-losses >"$out/ffpa-plain2.txt" 2>&1
nanprov run --out "$out/ffpa-clean" --capture 'layer=3,step=0' -- "${g4[@]}" --print-losses >"$out/ffpa-clean.txt" 2>&1
same() { cmp -s <(grep '^step' "$1") <(grep '^step' "$2") && echo yes || echo NO; }
echo "== clean: $(nanprov report "$out/ffpa-clean" | head -1 | cut -c1-70); losses identical:" \
  "plain/plain $(same "$out/ffpa-plain.txt" "$out/ffpa-plain2.txt"), plain/nanprov $(same "$out/ffpa-plain.txt" "$out/ffpa-clean.txt")"
for capture in "$out/ffpa-clean"/captures/*.safetensors; do nanprov replay "$capture" | sed -n '1,2p;5,12p'; done

echo "== GPU gtest"
(cd build-device && ctest --timeout 600 --output-on-failure -R "Gpu.Ffpa" 2>&1 | tail -15) | tee "$out/ffpa-ctest.txt"
