"""A small model whose attention is FlexAttention, run for inference on the CPU (FlexAttention has
no CPU backward). Each layer adds a distance bias through its score_mod; with --bad-layer L, that
layer's score_mod takes log(q_idx - kv_idx) instead of log(|q_idx - kv_idx| + 1): NaN wherever a
query looks at a later key, in one layer only, and the output goes NaN."""
import argparse

import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


class FlexSelfAttention(nn.Module):
    def __init__(self, d_model, heads, bad):
        super().__init__()
        self.heads, self.bad = heads, bad
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def score_mod(self, score, b, h, q_idx, kv_idx):
        distance = (q_idx - kv_idx).float()
        return score - 0.1 * (torch.log(distance) if self.bad else torch.log(distance.abs() + 1))

    def forward(self, x, block_mask=None):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        o = flex_attention(q, k, v, score_mod=self.score_mod, block_mask=block_mask)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


class Model(nn.Module):
    def __init__(self, layers, heads, bad_layer):
        super().__init__()
        self.layers = nn.ModuleList(FlexSelfAttention(32, heads, i == bad_layer) for i in range(layers))

    def forward(self, x, block_mask=None):
        for layer in self.layers:
            x = x + layer(x, block_mask)
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4, help="of d_model 32 (Inductor's flex kernels need head_dim >= 16)")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--bad-layer", type=int, default=-1)
    p.add_argument("--causal", action="store_true", help="a causal block mask")
    p.add_argument("--device", default="cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor's flex kernels)")
    p.add_argument("--print-outputs", action="store_true",
                   help="print each pass's output sum and a fresh random draw as exact hex floats (tests)")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Model(args.layers, args.heads, args.bad_layer).eval().to(args.device)
    if args.compile:
        model = torch.compile(model)
    mask = None
    if args.causal:
        mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 16, 16, device=args.device)
    with torch.no_grad():
        for i in range(args.passes):
            x = model(torch.randn(2, 16, 32).to(args.device), mask)
            if args.print_outputs:  # the random draw shows nothing consumed the global generator
                print(f"pass {i}: {x.double().sum().item().hex()} {torch.rand(1).item().hex()}", flush=True)
                continue
            print(f"pass {i}: output finite: {bool(torch.isfinite(x).all())}", flush=True)


if __name__ == "__main__":
    main()
