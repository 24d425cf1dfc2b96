#!/usr/bin/env bash
# nanprov's overhead on the GPU, measured side by side in one run (shared/GPU.md, issue 3):
# rounds alternate every configuration, so clock and thermal drift hit all of them alike.
#   none      no instrumentation
#   nanprov   `nanprov run`: every role of every call checked; kernels traced in steps 0-1 (default)
#   exact     `nanprov run --trace-steps 0`: checked, and every call's kernels traced by CUPTI
#   checks    `nanprov run --no-kernels`: checks only, no CUPTI
#   deferred  `nanprov run` with checks deferred and merged into batched launches
#             (NANPROV_DEFER_CHECKS=1, issue 52; the default checks at the call): deferred against
#             nanprov, and their probe_cost lines, are what deferring saves
#   trail     `nanprov run --trail`: the default, plus every module's output and input gradient
#   audit     `nanprov run --audit`: the default, plus the audit of each call signature (issue 14)
#   nosentinel `nanprov run` without the gradient sentinel (NANPROV_SENTINEL=0): nanprov/nosentinel
#             is what the sentinel's one fused check of all gradients and parameters costs
#   bootstrap `nanprov run` with no attention probe installed (NANPROV_HOOKS=none): the bootstrap, the
#             store and the gradient sentinel only; nanprov/bootstrap is what probing attention costs
#   nodigest  `nanprov run` without the replica digests (NANPROV_REPLICA_DIGESTS=0): with BENCH_DDP=1
#             (the model under one-rank DDP, whose parameters are digested after every step),
#             nanprov/nodigest is what the digests cost (issue 64: <= 1.002x of a GPU-bound step)
#   reread    `nanprov run` with every backward reading its inputs again (NANPROV_BACKWARD_REREAD=1):
#             reread/nanprov is what a backward not reading again what its forward checked saves
#             (issue 66; probes/libtorch/forward_checks.h)
#   anomaly   torch.autograd.detect_anomaly(check_nan=True)
#   naive     isfinite().all() with a host sync on Q, K, V, O and their gradients
# For each model (GPU-bound: B=4 S=2048; launch-bound: B=1 S=256; hf-llama: a random-init ~1B Hugging
# Face Llama, 16 layers, d 2048, GQA 16/4, B=2 S=2048, bf16, AdamW) prints the median step time of
# every configuration, its ratio to `none`, the mean over every step from the first (one-time costs
# included: the audit's first calls, autotuning) and its ratio, and the host synchronisations
# nanprov added per step.
#   bench/gpu_overhead.sh [rounds] [steps]      (needs a CUDA GPU and a built nanprov on PATH)
# BENCH_CONFIGS narrows the configurations, e.g. BENCH_CONFIGS="none nanprov checks".
# BENCH_COMPILE=1 trains torch.compile(model) (its first 8 steps, the compile, not timed).
# BENCH_DDP=1 trains the hand-written model under one-rank DDP (NCCL): its parameters are digested
# after every step; the `nodigest` configuration is the same run without the digests.
# BENCH_ATTENTION=fa4|flex runs the model with FlashAttention-4 or compiled FlexAttention (seen
# through the bootstrap's brackets); BENCH_MODELS="gpu-bound" runs only that model (of gpu-bound, launch-bound, hf-llama).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-2}" steps="${2:-30}"
py="${PYTHON:-python3}"
configs=(${BENCH_CONFIGS:-none nanprov nosentinel exact checks anomaly naive})
want() { [[ " ${configs[*]} " == *" $1 "* ]]; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# "median:mean" of one run's output.
step_ms() { awk '/step_ms/ {for (i = 1; i < NF; ++i) { if ($i == "step_ms") m = $(i + 1); if ($i == "mean_ms") a = $(i + 1) } print m ":" a}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
medians() { for x in "$@"; do echo "${x%%:*}"; done; }
# (largest - smallest) / median of the numbers, in percent: a configuration's own noise.
spread() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; if (m > 0) printf "%.1f", 100*(a[NR]-a[1])/m; else printf "?"}'; }
means() { for x in "$@"; do echo "${x##*:}"; done; }

bench_model() {
  local name="$1"; shift
  local args=("$root/bench/gpu_model.py" --steps "$steps" --attention "${BENCH_ATTENTION:-sdpa}" "$@")
  # BENCH_COMPILE=1: the model under torch.compile, its first steps (the compile) left out.
  [ "${BENCH_COMPILE:-0}" = 1 ] && args+=(--compile --warmup 8)
  [ "${BENCH_DDP:-0}" = 1 ] && args+=(--ddp)
  declare -A ms=()
  local syncs="?"
  for r in $(seq "$rounds"); do
    want none && ms[none]+=" $("$py" "${args[@]}" | step_ms)"
    want nanprov && ms[nanprov]+=" $(nanprov run --out "$tmp/$name-full-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want reread && ms[reread]+=" $(NANPROV_BACKWARD_REREAD=1 nanprov run --out "$tmp/$name-reread-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want nodigest && ms[nodigest]+=" $(NANPROV_REPLICA_DIGESTS=0 nanprov run --out "$tmp/$name-nodigest-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want nosentinel && ms[nosentinel]+=" $(NANPROV_SENTINEL=0 nanprov run --out "$tmp/$name-nosent-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want exact && ms[exact]+=" $(nanprov run --trace-steps 0 --out "$tmp/$name-exact-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want bootstrap && ms[bootstrap]+=" $(NANPROV_HOOKS=none nanprov run --out "$tmp/$name-boot-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want deferred && ms[deferred]+=" $(NANPROV_DEFER_CHECKS=1 nanprov run --out "$tmp/$name-deferred-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want checks && ms[checks]+=" $(nanprov run --no-kernels --out "$tmp/$name-checks-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want trail && ms[trail]+=" $(nanprov run --trail --out "$tmp/$name-trail-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want audit && ms[audit]+=" $(nanprov run --audit --audit-warn-only --out "$tmp/$name-audit-$r" -- "$py" "${args[@]}" 2>/dev/null | step_ms)"
    want anomaly && ms[anomaly]+=" $("$py" "${args[@]}" --check anomaly | step_ms)"
    want naive && ms[naive]+=" $("$py" "${args[@]}" --check naive | step_ms)"
    # From the default run, or the trail's where the default did not run.
    local probed="$tmp/$name-full-$r"; [ -d "$probed" ] || probed="$tmp/$name-trail-$r"
    syncs="$(nanprov sql "$probed" "SELECT value FROM meta WHERE key='host_syncs'" --json |
             grep -o '"value": *"[0-9]*"' | grep -o '[0-9]*' | head -1)"
  done
  local base base_mean; base="$(median $(medians ${ms[none]}))" base_mean="$(median $(means ${ms[none]}))"
  echo "== $name ($*, attention ${BENCH_ATTENTION:-sdpa}), $rounds rounds x $steps steps"
  echo "  config   steady: median step   ratio | every step: mean   ratio   (rounds median:mean ms)"
  for c in "${configs[@]}"; do
    local m a; m="$(median $(medians ${ms[$c]}))" a="$(median $(means ${ms[$c]}))"
    awk -v c="$c" -v m="$m" -v b="$base" -v a="$a" -v ba="$base_mean" -v all="${ms[$c]}" \
      'BEGIN {printf "  %-8s %13.2f ms  %6.3fx | %12.2f ms  %6.3fx   (%s)\n", c, m, m / b, a, a / ba, all}'
  done
  # The ratios mean something only beyond the baseline's own spread (issue 26: state it).
  if [ "$rounds" -gt 1 ]; then
    echo "  none's own rounds span $(spread $(medians ${ms[none]}))% of their median (steady): a ratio closer to 1x than that is inside the noise"
  fi
  if want audit; then
    nanprov report "$tmp/$name-audit-1" | grep -E "^  (audit|    [0-9]+ not audited)"
  fi
  local calls; calls="$(nanprov sql "$(ls -d "$tmp/$name-full-1" "$tmp/$name-trail-1" 2>/dev/null | head -1)" "SELECT COUNT(*) AS n FROM calls" --json | grep -o '[0-9]\+' | head -1)"
  echo "  host syncs added by nanprov over the whole run: $syncs ($calls attention calls checked)"
  # The probes' own time on the training thread, by stage (meta probe_cost, first nanprov round).
  want nanprov && echo "  probe_cost: $(nanprov sql "$tmp/$name-full-1" "SELECT value FROM meta WHERE key='probe_cost'" | tail -n +2 | sed 's/ *$//')"
  # Deferred checks: calls deferred, batched launches, fallbacks to immediate (meta deferred_checks).
  # An `if`, not `want deferred && ...`: as the function's last command a false `want` was its
  # status, and under `set -e` the script exited 1 after the first model's table (issue 66).
  if want deferred; then
    echo "  deferred_checks: $(nanprov sql "$tmp/$name-deferred-1" "SELECT value FROM meta WHERE key='deferred_checks'" | tail -n +2 | sed 's/ *$//')"
    echo "  probe_cost deferred: $(nanprov sql "$tmp/$name-deferred-1" "SELECT value FROM meta WHERE key='probe_cost'" | tail -n +2 | sed 's/ *$//')"
  fi
}

models=(${BENCH_MODELS:-gpu-bound launch-bound hf-llama})
[[ " ${models[*]} " == *" gpu-bound "* ]] && bench_model gpu-bound --batch 4 --seq 2048
[[ " ${models[*]} " == *" launch-bound "* ]] && bench_model launch-bound --batch 1 --seq 256
# The anchors (anomaly, naive) are the hand-written model's; the HF model runs the rest.
if [[ " ${models[*]} " == *" hf-llama "* ]]; then
  configs=($(for c in "${configs[@]}"; do [[ "$c" == anomaly || "$c" == naive ]] || echo "$c"; done))
  bench_model hf-llama --model hf-llama --layers 16 --batch 2 --seq 2048
fi
exit 0
