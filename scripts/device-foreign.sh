#!/usr/bin/env bash
# Runs on the GPU machine: attention that nanprov sees through the bootstrap, not the dispatcher.
#   scripts/device-foreign.sh fa4     FlashAttention-4 training: an overflow inside one layer found,
#                                     its CuTe kernels named, replayed; clean twins clean and
#                                     bit-identical; an injected backward edge; packed sequences
#   scripts/device-foreign.sh flex    compiled FlexAttention training: a NaN score_mod found at its
#                                     step, layer and phase with Inductor's kernels named; clean twin
#                                     clean and bit-identical; an injected backward edge; replays
#   scripts/device-foreign.sh flex-eager  only the eager FlexAttention training and its replays
#   scripts/device-foreign.sh plain   plain-softmax attention on CUDA: a Hugging Face Llama with the same
#                                     overflow in eager and sdpa (same edge expected), bf16; MHA's
#                                     need_weights path over padded batches (fully masked rows), replayed
#   scripts/device-foreign.sh bench   the benchmark model's FA4 and FlexAttention variants, plain vs
#                                     nanprov vs checks only, side by side
# FA4 is not installed there: its wheels travel in .device/fa4a and .device/fa4b (shared/GPU.md,
# "FlashAttention-4 on the GPU machine"; the 92 MB cu13 wheel split in parts *.part-*), and are
# unpacked into /tmp/fa4 once. Logs go to $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1

fa4=/tmp/fa4
if [ ! -d "$fa4/flash_attn" ] && ls .device/fa4b/*.part-* >/dev/null 2>&1; then  # both halves have arrived
  mkdir -p "$fa4" /tmp/fa4-wheels
  cp .device/fa4a/*.whl .device/fa4b/*.whl /tmp/fa4-wheels/ 2>/dev/null
  for part in .device/fa4*/*.part-aa; do
    base="$(basename "${part%.part-aa}")"
    cat .device/fa4*/"$base".part-* >"/tmp/fa4-wheels/$base"  # fa4a's part sorts before fa4b's
  done
  for w in /tmp/fa4-wheels/*.whl; do python3 -m zipfile -e "$w" "$fa4"; done
fi
export PYTHONPATH="$fa4:$fa4/nvidia_cutlass_dsl/dsl_packages"
edge() { grep -o '"name": "rank[0-9]*:layer[0-9]*:call[0-9]*"' "$1" | head -1 | cut -d'"' -f4; }

case "${1:-fa4}" in
plain)
  for attn in eager sdpa; do
    nanprov run --out "$out/hf-$attn" -- python3 examples/hf_llama.py --device cuda --dtype bfloat16 --attn $attn \
      --overflow-layer 1 --overflow-step 1 >"$out/hf-$attn.log" 2>&1
    echo "== HF Llama $attn, bf16, overflow in layer 1 at step 1"
    nanprov report "$out/hf-$attn" | sed -n '1,4p'
    nanprov kernels "$out/hf-$attn" --call "$(nanprov report "$out/hf-$attn" --json >"$out/hf-$attn.json"; edge "$out/hf-$attn.json")" | head -4
    nanprov replay "$out/hf-$attn" | sed -n '1,2p;5,11p'
  done
  nanprov run --out "$out/hf-eager-clean" -- python3 examples/hf_llama.py --device cuda --dtype bfloat16 --attn eager \
    >/dev/null 2>&1
  echo "== HF Llama eager clean: $(nanprov report "$out/hf-eager-clean" | head -1 | cut -c1-90)"
  nanprov run --out "$out/mha" -- python3 examples/mha_padding.py --device cuda --oracle >"$out/mha.log" 2>&1
  echo "== nn.MultiheadAttention need_weights=True, padded banded batches, CUDA float32"
  grep oracle "$out/mha.log"
  nanprov report "$out/mha" | sed -n '1,5p'
  nanprov replay "$out/mha" | sed -n '1,2p;5,11p'
  ;;
fa4)
  python3 -c "import flash_attn.cute as f; print('flash_attn.cute', f.__file__)" 2>&1 | tail -1
  fa=(python3 examples/flash_attn_training.py --steps 4 --seq 256)
  for layout in "" "--varlen"; do
    tag="fa4${layout:+-varlen}"
    nanprov run --out "$out/$tag" -- "${fa[@]}" $layout --overflow-layer 1 --overflow-step 2 >"$out/$tag.log" 2>&1
    echo "== $tag overflow (report exit $(nanprov report "$out/$tag" --json >"$out/$tag.json"; echo $?))"
    nanprov report "$out/$tag" | sed -n '1,5p'
    nanprov kernels "$out/$tag" --call "$(edge "$out/$tag.json")" | head -6
    nanprov replay "$out/$tag" | sed -n '2p;5,11p'
    # Clean twin, every call captured at step 0: bit-identical losses, then a replay of both phases.
    "${fa[@]}" $layout --print-losses >"$out/$tag-plain.txt" 2>&1
    nanprov run --out "$out/$tag-clean" --capture 'layer=0,step=0' -- "${fa[@]}" $layout --print-losses \
      >"$out/$tag-clean.txt" 2>&1
    echo "== $tag clean: $(nanprov report "$out/$tag-clean" | head -1 | cut -c1-60); losses identical:" \
      "$(cmp -s <(grep '^step' "$out/$tag-plain.txt") <(grep '^step' "$out/$tag-clean.txt") && echo yes || echo NO)"
    nanprov sql "$out/$tag-clean" "SELECT phase, COUNT(*) AS calls FROM calls GROUP BY phase"
    for capture in "$out/$tag-clean"/captures/*.safetensors; do nanprov replay "$capture" | sed -n '1,2p;5,11p'; done
  done
  # A backward edge (dQ corrupted by --inject at step 1, layer 1) is FA4's backward, kernels named.
  nanprov run --out "$out/fa4-bwd" --inject 'layer=1,phase=bwd,tensor=dQ,step=1' -- "${fa[@]}" >/dev/null 2>&1
  nanprov report "$out/fa4-bwd" --json >"$out/fa4-bwd.json"
  nanprov report "$out/fa4-bwd" | sed -n '1,3p'
  nanprov kernels "$out/fa4-bwd" --call "$(edge "$out/fa4-bwd.json")" | head -8
  ;;
flex)
  fl=(python3 examples/flex_attention.py --train --compile --device cuda --dtype bfloat16 --d-model 256 --heads 4
      --seq 256 --passes 4)
  nanprov run --out "$out/flex" -- "${fl[@]}" --bad-layer 1 --bad-step 2 >"$out/flex.log" 2>&1
  echo "== compiled flex, NaN score_mod in layer 1 at step 2 (report exit $(nanprov report "$out/flex" --json \
    >"$out/flex.json"; echo $?))"
  nanprov report "$out/flex" | sed -n '1,6p'
  nanprov kernels "$out/flex" --call "$(edge "$out/flex.json")" | head -6
  nanprov replay "$out/flex" | sed -n '2p'
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind-plain "${fl[@]}" --print-outputs >"$out/flex-plain.txt" 2>&1
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind-probed nanprov run --out "$out/flex-clean" -- "${fl[@]}" --print-outputs \
    >"$out/flex-clean.txt" 2>&1
  echo "== compiled flex clean: $(nanprov report "$out/flex-clean" | head -1 | cut -c1-60); losses identical:" \
    "$(cmp -s <(grep '^step' "$out/flex-plain.txt") <(grep '^step' "$out/flex-clean.txt") && echo yes || echo NO)"
  grep '^step' "$out/flex-clean.txt" | head -2
  nanprov sql "$out/flex-clean" "SELECT phase, COUNT(*) AS calls FROM calls GROUP BY phase"
  nanprov kernels "$out/flex-clean" | head -8
  nanprov run --out "$out/flex-bwd" --inject 'layer=1,phase=bwd,tensor=dQ,step=1' -- "${fl[@]}" >/dev/null 2>&1
  nanprov report "$out/flex-bwd" --json >"$out/flex-bwd.json"
  nanprov report "$out/flex-bwd" | sed -n '1,3p'
  nanprov kernels "$out/flex-bwd" --call "$(edge "$out/flex-bwd.json")" | head -6
  ;;&
flex|flex-eager)
  # Eager FlexAttention training: the capture holds the materialised bias, so replay judges it.
  eager=(python3 examples/flex_attention.py --train --device cuda --dtype bfloat16 --d-model 256 --heads 4 --seq 256
         --passes 2)
  nanprov run --out "$out/flex-eager" --capture 'layer=0,step=0' -- "${eager[@]}" >/dev/null 2>&1
  echo "== eager flex clean"
  nanprov report "$out/flex-eager" | sed -n '1,6p'
  for capture in "$out/flex-eager"/captures/*.safetensors; do nanprov replay "$capture" | sed -n '1,2p;5,11p'; done
  ;;
bench)
  for attention in fa4 flex; do
    BENCH_ATTENTION=$attention BENCH_MODELS=gpu-bound BENCH_CONFIGS="${BENCH_CONFIGS:-none nanprov checks}" PYTHON=python3 \
      bench/gpu_overhead.sh "${NANPROV_BENCH_ROUNDS:-2}" "${NANPROV_BENCH_STEPS:-20}"
  done | tee "$out/bench-foreign.txt"
  ;;
esac
