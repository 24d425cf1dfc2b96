#!/usr/bin/env bash
# Overhead of `nanprov run` on the CPU demo model, measured side by side in one run: rounds
# alternate plain training and training under nanprov, so machine noise hits both alike.
# Prints steady-state steps/s for each and the ratio (plain / nanprov = slowdown factor).
#   bench/cpu_overhead.sh [rounds] [steps] [demo|handwritten|ddp]
# `ddp` is the demo model under DistributedDataParallel, two ranks over gloo (torchrun): the cost
# of checking its collectives (each gradient bucket's all-reduce, in and out) on top of the rest;
# the speed is rank 0's.
# `handwritten` is the hand-written attention model, checked by default (softmax(q kᵀ) v found by its
# shape: bmm, baddbmm and _softmax wrapped, each call's Q, K, V, S, P, O and gradients checked);
# PROBE_MODULE=1 runs it under --probe-module HandAttention as well (the module probes' hooks).
# BASELINE=/path/to/other/build/bin/nanprov adds a third column in the same rounds: another build
# of nanprov (an earlier commit), so a change's cost is measured side by side, not across runs.
# TRAIL=1 adds a column in the same rounds: nanprov run --trail (every module's output and input
# gradient checked too), against plain training and the default nanprov run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/activate"
rounds="${1:-3}" steps="${2:-60}" model="${3:-demo}"
launch=(python)
case "$model" in
  demo) args=("$root/examples/tiny_transformer.py" --steps "$steps" --mask --speed) opts=() ;;
  handwritten) args=("$root/examples/handwritten_attention.py" --steps "$steps" --speed) opts=()
               [ "${PROBE_MODULE:-0}" != 1 ] || opts=(--probe-module HandAttention) ;;
  ddp) args=("$root/examples/tiny_transformer.py" --steps "$steps" --mask --speed --ddp) opts=()
       launch=(torchrun --standalone --nproc-per-node=2) ;;
  *) echo "bench/cpu_overhead.sh: unknown model '$model' (demo, handwritten or ddp)" >&2; exit 2 ;;
esac
export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}"  # loopback: sandboxes have no other interface
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
speed() { grep -o 'steps_per_sec [0-9.]*' | awk 'NR == 1 {print $2}'; }
plain=() probed=() baseline=() trail=()
for r in $(seq "$rounds"); do
  plain+=("$("${launch[@]}" "${args[@]}" 2>/dev/null | speed)")
  probed+=("$(nanprov run --out "$tmp/r$r" "${opts[@]}" -- "${launch[@]}" "${args[@]}" 2>/dev/null | speed)")
  [ "${TRAIL:-0}" != 1 ] || trail+=("$(nanprov run --out "$tmp/t$r" --trail "${opts[@]}" -- "${launch[@]}" "${args[@]}" 2>/dev/null | speed)")
  [ -z "${BASELINE:-}" ] || baseline+=("$("$BASELINE" run --out "$tmp/b$r" "${opts[@]}" -- "${launch[@]}" "${args[@]}" 2>/dev/null | speed)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p="$(median "${plain[@]}")" n="$(median "${probed[@]}")"
echo "plain   steps/s: ${plain[*]} (median $p)"
echo "nanprov steps/s: ${probed[*]} (median $n)"
awk -v p="$p" -v n="$n" 'BEGIN {printf "nanprov step time / plain step time: %.3fx\n", p / n}'
if [ "${TRAIL:-0}" = 1 ]; then
  t="$(median "${trail[@]}")"
  echo "nanprov --trail steps/s: ${trail[*]} (median $t)"
  awk -v p="$p" -v t="$t" -v n="$n" 'BEGIN {printf "--trail step time / plain step time: %.3fx; --trail / default nanprov: %.3fx\n", p / t, n / t}'
fi
if [ -n "${BASELINE:-}" ]; then
  b="$(median "${baseline[@]}")"
  echo "baseline steps/s: ${baseline[*]} (median $b; $BASELINE)"
  awk -v p="$p" -v b="$b" -v n="$n" 'BEGIN {printf "baseline step time / plain step time: %.3fx; nanprov / baseline: %.3fx\n", p / b, b / n}'
fi
