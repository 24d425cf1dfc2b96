#!/usr/bin/env bash
# Overhead of `nanprov run` on the CPU demo model, measured side by side in one run: rounds
# alternate plain training and training under nanprov, so machine noise hits both alike.
# Prints steady-state steps/s for each and the ratio (plain / nanprov = slowdown factor).
#   bench/cpu_overhead.sh [rounds] [steps]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/activate"
rounds="${1:-3}" steps="${2:-60}"
args=("$root/examples/tiny_transformer.py" --steps "$steps" --mask --speed)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
speed() { grep -o 'steps_per_sec [0-9.]*' | awk '{print $2}'; }
plain=() probed=()
for r in $(seq "$rounds"); do
  plain+=("$(python "${args[@]}" | speed)")
  probed+=("$(nanprov run --out "$tmp/r$r" -- python "${args[@]}" 2>/dev/null | speed)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p="$(median "${plain[@]}")" n="$(median "${probed[@]}")"
echo "plain   steps/s: ${plain[*]} (median $p)"
echo "nanprov steps/s: ${probed[*]} (median $n)"
awk -v p="$p" -v n="$n" 'BEGIN {printf "nanprov step time / plain step time: %.3fx\n", p / n}'
