"""python3 silent_wrong_search.py [bf16|fp16] [MASK,...]

Looks for silent-wrong SDPA results on this GPU: finite outputs or gradients that are far from a
float64 reference while PyTorch's MATH backend in the same dtype is close. Each SDPA backend is
forced in turn over head_dim, masks (bool, additive in the query's dtype and in float32, expanded
with zero strides), causal with s_q != s_kv, GQA and odd lengths. Prints one line per case that
looks wrong, then a count. Used to find the real bug the audit must catch (issue 14); nanprov is
not involved here.
"""
import contextlib
import itertools
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": [SDPBackend.CUDNN_ATTENTION], "flash": [SDPBackend.FLASH_ATTENTION],
            "efficient": [SDPBackend.EFFICIENT_ATTENTION],
            # what a model gets without asking: PyTorch's own priority order
            "default": None}
MASKS = ["none", "bool", "bool_pad", "bool_expanded", "add_same", "add_f32", "add_expanded", "alibi_f32", "alibi_same"]


def make_mask(kind, b, h, sq, skv, dtype, gen):
    if kind == "none":
        return None
    keep = torch.rand(b, 1, sq, skv, generator=gen, device="cuda") > 0.3
    keep[..., 0] = True  # every row sees a key
    if kind == "bool":
        return keep
    if kind == "bool_pad":
        keep = torch.ones(b, 1, sq, skv, dtype=torch.bool, device="cuda")
        keep[0, ..., skv - skv // 3:] = False
        return keep
    if kind == "bool_expanded":
        return keep[:, :, :1, :].expand(b, h, sq, skv)
    if kind.startswith("alibi"):  # finite: no -inf anywhere
        slopes = 2.0 ** (-8.0 * torch.arange(1, h + 1, device="cuda") / h)
        dist = (torch.arange(sq, device="cuda")[:, None] - torch.arange(skv, device="cuda")[None, :]).abs()
        bias = -(slopes[:, None, None] * dist)[None].float()
        return bias if kind == "alibi_f32" else bias.to(dtype)
    add = torch.zeros(b, 1, sq, skv, device="cuda").masked_fill(~keep, float("-inf"))
    add = add + 0.5 * torch.randn(b, 1, sq, skv, generator=gen, device="cuda")  # a bias, too
    if kind == "add_f32":
        return add
    if kind == "add_same":
        return add.to(dtype)
    if kind == "add_expanded":
        return add.to(dtype)[:, :, :1, :].expand(b, h, sq, skv)
    raise ValueError(kind)


def run(q, k, v, mask, causal, gqa, do, backends):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
    o.backward(do)
    return [o.detach(), q.grad, k.grad, v.grad]


def rel(a, g):
    a, g = a.double(), g.double()
    return ((a - g).norm() / g.norm().clamp_min(1e-300)).item()


def main():
    gen = torch.Generator(device="cuda").manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[sys.argv[1] if len(sys.argv) > 1 else "bf16"]
    found = tried = 0
    masks = sys.argv[2].split(",") if len(sys.argv) > 2 else MASKS
    grid = itertools.product([64, 128, 256], masks, [False, True], [(1, 1), (4, 1)],
                             [(128, 128), (200, 200), (64, 192), (192, 64), (1000, 1000)])
    for d, mask_kind, causal, (group, _), (sq, skv) in grid:
        if causal and mask_kind != "none":
            continue
        b, hkv = 2, 2
        h = hkv * group
        q = torch.randn(b, h, sq, d, generator=gen, device="cuda", dtype=dtype)
        k = torch.randn(b, hkv, skv, d, generator=gen, device="cuda", dtype=dtype)
        v = torch.randn(b, hkv, skv, d, generator=gen, device="cuda", dtype=dtype)
        do = torch.randn(b, h, sq, d, generator=gen, device="cuda", dtype=dtype)
        mask = make_mask(mask_kind, b, h, sq, skv, dtype, gen)
        gqa = group > 1
        m64 = mask.double() if mask is not None and mask.dtype != torch.bool else mask
        try:
            gold = run(q.double(), k.double(), v.double(), m64, causal, gqa, do.double(), [SDPBackend.MATH])
            low = run(q, k, v, mask, causal, gqa, do, [SDPBackend.MATH])
        except Exception as e:  # noqa: BLE001
            print(f"reference failed d={d} {mask_kind} causal={causal} gqa={group} {sq}x{skv}: {e}")
            continue
        for name, backend in BACKENDS.items():
            try:
                out = run(q, k, v, mask, causal, gqa, do, backend)
            except Exception:  # noqa: BLE001  refused: not this backend's case
                continue
            tried += 1
            for role, b_t, l_t, g_t in zip(["O", "dQ", "dK", "dV"], out, low, gold):
                nonfinite = (~torch.isfinite(b_t)).sum().item()
                rb, rl = rel(b_t, g_t), rel(l_t, g_t)
                zero = b_t.abs().max().item() == 0 and g_t.abs().max().item() > 0
                if nonfinite or zero or (rb > 4 * rl + 2e-3 and rb > 1e-2):
                    found += 1
                    print(f"{name:9s} d={d} mask={mask_kind} causal={causal} gqa={group} s={sq}x{skv} {role}: "
                          f"rel {rb:.3g} (math {rl:.3g}) nonfinite {nonfinite} zero {zero} "
                          f"mask dtype {None if mask is None else mask.dtype} strides {None if mask is None else mask.stride()}",
                          flush=True)
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {dtype}: {tried} backend runs, "
          f"{found} wrong tensors")


if __name__ == "__main__":
    main()
