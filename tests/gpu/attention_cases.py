"""Attention calls across SDPA backends, head dims, GQA and masks: the attribution check.

Run it twice on a GPU, then compare:
  nanprov run --out RUN -- python attention_cases.py --out cases.json        # nanprov attributes
  python attention_cases.py --out cases.json --profile profiler.json         # torch.profiler attributes
  python attention_cases.py --out cases.json --profile profiler.json --compare RUN
The comparison prints, per case and phase, whether nanprov's kernel list for the call equals the
kernels torch.profiler puts under the same op (and its children), as sets of distinct kernel
names (memsets and memcpys are not kernels). Exit 1 on any mismatch.
Case i runs inside module cases.<i>, so nanprov names its calls rank0:layer<i>:call0/1.
"""
import argparse
import collections
import json
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "cudnn": (SDPBackend.CUDNN_ATTENTION, "aten::_scaled_dot_product_cudnn_attention"),
    "flash": (SDPBackend.FLASH_ATTENTION, "aten::_scaled_dot_product_flash_attention"),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, "aten::_scaled_dot_product_efficient_attention"),
    "math": (SDPBackend.MATH, "aten::scaled_dot_product_attention"),
}


def cases():
    out = []
    for backend in BACKENDS:
        for head_dim in (128, 256, 512):
            for gqa in (False, True):
                for mask in (False, True):
                    out.append({"backend": backend, "head_dim": head_dim, "gqa": gqa, "mask": mask})
    return out


class Case(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec

    def forward(self, q, k, v, mask):
        backend = BACKENDS[self.spec["backend"]][0]
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.spec["gqa"])


class Cases(nn.Module):
    def __init__(self, specs):
        super().__init__()
        self.cases = nn.ModuleList(Case(s) for s in specs)

    def forward(self, i, q, k, v, mask):
        return self.cases[i](q, k, v, mask)


def tensors(spec, gen):
    b, hq, s, d = 2, 8, 256, spec["head_dim"]
    hkv = 2 if spec["gqa"] else hq
    kw = dict(device="cuda", dtype=torch.bfloat16, generator=gen)
    q = torch.randn(b, hq, s, d, **kw).requires_grad_()
    k = torch.randn(b, hkv, s, d, **kw).requires_grad_()
    v = torch.randn(b, hkv, s, d, **kw).requires_grad_()
    mask = None
    if spec["mask"]:
        mask = torch.ones(b, 1, s, s, dtype=torch.bool, device="cuda")
        mask[..., s - 32:] = False  # key padding; every query still sees keys
    return q, k, v, mask


def run_case(root, i, spec, gen):
    q, k, v, mask = tensors(spec, gen)
    o = root(i, q, k, v, mask)
    o.backward(torch.randn(o.shape, device="cuda", dtype=o.dtype, generator=gen))
    torch.cuda.synchronize()


def subtree_kernels(event):
    """Kernel names under an op. torch.profiler lists a kernel under an op and again under the
    op's children, and counts memsets and memcpys as kernels: compare distinct kernel names."""
    names = {k.name for k in event.kernels if not k.name.startswith(("Memset", "Memcpy"))}
    for child in event.cpu_children:
        names |= subtree_kernels(child)
    return names


def profiled_kernels(prof, spec):
    """Kernels torch.profiler attributes to the op nanprov names for each phase."""
    fwd_op = BACKENDS[spec["backend"]][1]
    found = {}
    for e in prof.events():
        if "fwd" not in found and e.name == fwd_op:
            found["fwd"] = sorted(subtree_kernels(e))
        if "bwd" not in found and spec["backend"] != "math" and e.name == fwd_op + "_backward":
            found["bwd"] = sorted(subtree_kernels(e))
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="where to write which cases ran")
    p.add_argument("--profile", help="run under torch.profiler and write its kernels per case here")
    p.add_argument("--compare", metavar="RUN", help="compare the nanprov run RUN with --profile's file")
    p.add_argument("--nanprov", default="nanprov")
    args = p.parse_args()
    if args.compare:
        sys.exit(compare(args))

    specs = cases()
    root = Cases(specs)
    gen = torch.Generator(device="cuda").manual_seed(0)
    results, profiled = [], {}
    for i, spec in enumerate(specs):
        try:
            if args.profile:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    run_case(root, i, spec, gen)
                profiled[i] = profiled_kernels(prof, spec)
            else:
                run_case(root, i, spec, gen)
            results.append(dict(spec, case=i, status="ran"))
        except RuntimeError as e:
            results.append(dict(spec, case=i, status="unsupported", why=str(e).splitlines()[0][:120]))
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    if args.profile:
        with open(args.profile, "w") as f:
            json.dump(profiled, f, indent=1)


def compare(args):
    with open(args.out) as f:
        results = json.load(f)
    with open(args.profile) as f:
        profiled = json.load(f)
    calls = json.loads(subprocess.run([args.nanprov, "kernels", args.compare, "--json"],
                                      check=True, capture_output=True, text=True).stdout)
    by_layer = collections.defaultdict(dict)
    for c in calls:
        layer = int(c["call"].split(":")[1][len("layer"):])
        by_layer[layer][c["phase"]] = c
    mismatches = 0
    print(f"{'backend':9} {'hd':>3} {'gqa':5} {'mask':5} {'phase':5} {'result':10} {'n':>2}  main kernel (nanprov)")
    for r in results:
        label = f"{r['backend']:9} {r['head_dim']:3} {str(r['gqa']):5} {str(r['mask']):5}"
        if r["status"] != "ran":
            print(f"{label} {'-':5} unsupported   {r['why']}")
            continue
        for phase in ("fwd", "bwd"):
            call = by_layer[r["case"]].get(phase)
            want = profiled.get(str(r["case"]), {}).get(phase)
            if call is None:
                print(f"{label} {phase:5} {'NO CALL':10}")
                mismatches += 1
                continue
            got = sorted({k["name"] for k in call["kernels"]})
            main = next((k["short_name"] for k in call["kernels"] if k["main"]), "-")
            if want is None:
                verdict = "n/a" if not got else "extra"
                note = call["attribution"] if not got else main
                print(f"{label} {phase:5} {verdict:10} {len(got):2}  {note}")
                continue
            same = got == want
            mismatches += not same
            print(f"{label} {phase:5} {'match' if same else 'MISMATCH':10} {len(got):2}  {main}")
            if not same:
                print(f"    nanprov:  {sorted(got)}\n    profiler: {sorted(want)}")
    print(f"{mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    main()
