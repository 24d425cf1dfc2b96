#!/usr/bin/env bash
# Runs on the GPU machine: the audit (issue 14) on real backends. Logs go to $OUT.
#   scripts/device-audit.sh findings  the silent-wrong search (tests/gpu/silent_wrong_search.py) on
#                                     float32 and bf16 biases; clean bf16 runs under --audit over
#                                     head_dim 64-512 (causal, bool masks, GQA), which must find
#                                     nothing; and a run whose model passes a float32 ALiBi bias
#   scripts/device-audit.sh cost      the audit's cost on the benchmark model, side by side with
#                                     plain and default nanprov, over 100 steps; and the GPU tests
#   scripts/device-audit.sh coverage  the audit's coverage: a float32 bias in one deep layer from mid-run
#                                     found there; clean bf16 runs over head_dim 64-512 rotated through
#                                     200 steps (--audit-budget 100) find nothing; the benchmark model
#                                     under the default budget, with its coverage
#   scripts/device-audit.sh midrun    issue 63's case: six bf16 layers share one float32 additive mask
#                                     signature; from step 3 layer 4's mask hides a band of keys with
#                                     -30000. The plain-PyTorch oracle (cuDNN's O against MATH's) says
#                                     where it is wrong; the default --audit must find it there, and replay
#   scripts/device-audit.sh tests     the audit tests (CPU and GPU); the benchmark model audited,
#                                     with the slices it judged; losses with and without --audit;
#                                     every finding of the float32-bias run
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1

# One audited training run: its report's first line and audit lines, and the exit code.
audited() {
  local name="$1"; shift
  nanprov run --out "$out/$name" --audit -- python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 "$@" \
    >"$out/$name.log" 2>&1
  echo "== $name ($*): exit $?"
  grep -E "^(clean|rank|no fault)|audit" "$out/$name.log" | grep -v "recording into" | head -12
}

case "${1:-}" in
findings)
  python3 tests/gpu/silent_wrong_search.py bf16 alibi_f32,alibi_same 2>/dev/null | tail -25
  for hd in 64 128 256 512; do
    common=(--steps 3 --batch 4 --seq 256 --heads 4 --d-model $((4 * hd)))
    audited "clean-hd$hd-causal-gqa" "${common[@]}" --causal --kv-heads 2
    audited "clean-hd$hd-mask-gqa" "${common[@]}" --mask --kv-heads 2
  done
  audited alibi-f32 --steps 3 --batch 4 --seq 256 --heads 4 --d-model 512 --alibi-f32
  ;;
coverage)
  audited deep-f32 --steps 4 --batch 4 --seq 256 --heads 4 --d-model 512 --layers 4 --alibi-f32-layer 2 \
    --alibi-f32-from-step 2
  nanprov report "$out/deep-f32" | grep -E "audit finding|coverage|rotation"
  for hd in 64 128 256 512; do
    nanprov run --out "$out/rot-hd$hd" --audit --audit-budget 100 -- python3 examples/tiny_transformer.py --device cuda \
      --dtype bfloat16 --steps 200 --batch 2 --seq 256 --heads 4 --d-model $((4 * hd)) --layers 4 --mask --kv-heads 2 \
      >"$out/rot-hd$hd.log" 2>&1
    echo "== rotation hd$hd, 200 steps: exit $?"
    nanprov report "$out/rot-hd$hd" | grep -E "^(clean|rank)|audit:|coverage|rotation"
  done
  nanprov run --out "$out/bench-cov" --audit -- python3 bench/gpu_model.py --steps 60 --warmup 1 >"$out/bench-cov.log" 2>&1
  nanprov report "$out/bench-cov" | grep -E "audit|coverage|rotation|not audited"
  ;;
cost)
  BENCH_CONFIGS="none nanprov audit" BENCH_MODELS=gpu-bound bash bench/gpu_overhead.sh 2 100 2>&1 | tee "$out/audit-cost.txt"
  (cd build-device && ctest -j 4 -R "Gpu|Audit" --output-on-failure 2>&1 | tail -15)
  ;;
tests)
  (cd build-device && ctest -j 4 -R "Audit|CapturePolicy" --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failure|Expected|Which is" | head -40)
  nanprov run --out "$out/bench-audit" --audit -- python3 bench/gpu_model.py --steps 3 --warmup 1 >"$out/bench-audit.log" 2>&1
  grep -E "audit" "$out/bench-audit.log" | grep -v "recording into"
  python3 - "$out/bench-audit" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/captures/*.audit.json")):
    d = json.load(open(f))
    print(d["call"], d["phase"], d["backend"], d["verdict"], d.get("slice"),
          {r: t["verdict"] for r, t in d.get("tensors", {}).items()}, f"{d.get('seconds', 0):.2f} s")
PY
  losses=(examples/tiny_transformer.py --device cuda --dtype bfloat16 --steps 4 --batch 4 --seq 256 --heads 4 --d-model 512
          --mask --kv-heads 2 --print-losses)
  python3 "${losses[@]}" >"$out/losses-plain.txt" 2>/dev/null
  nanprov run --out "$out/losses-audit" --audit --audit-every 1 -- python3 "${losses[@]}" >"$out/losses-audit.txt" 2>/dev/null
  cmp -s "$out/losses-plain.txt" "$out/losses-audit.txt" && echo "losses bit-identical with --audit --audit-every 1:" \
    || echo "LOSSES DIFFER with --audit:"; tail -1 "$out/losses-plain.txt"; tail -1 "$out/losses-audit.txt"
  nanprov run --out "$out/alibi" --audit -- python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 --steps 2 \
    --batch 4 --seq 256 --heads 4 --d-model 512 --alibi-f32 >"$out/alibi.log" 2>&1
  echo "alibi run exit $?"
  nanprov report "$out/alibi" --json | python3 -c 'import json,sys
for f in json.load(sys.stdin)["audit_findings"]:
    print(f["name"], f["phase"], f["backend"], f["verdict"], {r: (t["verdict"], round(t["cosine"], 3)) for r, t in f["tensors"].items()})'
  ;;
midrun)
  midrun=(--steps 6 --batch 4 --seq 256 --heads 4 --d-model 512 --layers 6 --band-layer 4 --band-from-step 3 --band-f32)
  python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.manual_seed(0)
q, k, v = (torch.randn(4, 4, 256, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for band in (False, True):
    mask = torch.zeros(1, 1, 256, 256, device="cuda", dtype=torch.float32)
    if band:
        mask[..., :64] = -30000.0
    outs = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)):
        with sdpa_kernel(backend):
            outs[name] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    print(f"oracle: band={band} cuDNN vs MATH max |dO| = {(outs['cudnn'].float() - outs['math'].float()).abs().max().item():.4g}")
PY
  audited midrun "${midrun[@]}"
  nanprov report "$out/midrun" | grep -E "audit|regime|judged|layer" | head -20
  nanprov report "$out/midrun" --json >"$out/midrun.json"; echo "report exit $?"
  nanprov replay "$out/midrun" 2>&1 | tail -25
  ;;
*)
  echo "usage: scripts/device-audit.sh findings|coverage|cost|midrun|tests" >&2; exit 2 ;;
esac
