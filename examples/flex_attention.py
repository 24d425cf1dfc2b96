"""A small model whose attention is FlexAttention: run for inference (the default; FlexAttention has
no CPU backward) or, with --train on a GPU, trained. Each layer adds a distance bias through its
score_mod; with --bad-layer L, that layer's score_mod takes log(q_idx - kv_idx) instead of
log(|q_idx - kv_idx| + 1): NaN wherever a query looks at a later key, in one layer only, and the
output goes NaN. In training the bad score_mod acts only at --bad-step."""
import argparse

import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


class FlexSelfAttention(nn.Module):
    def __init__(self, d_model, heads, bad):
        super().__init__()
        self.heads, self.bad = heads, bad
        self.kernel_backend = ""
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    @staticmethod
    def score_mod(score, b, h, q_idx, kv_idx):
        return score - 0.1 * torch.log((q_idx - kv_idx).float().abs() + 1)

    @staticmethod
    def bad_score_mod(score, b, h, q_idx, kv_idx):
        return score - 0.1 * torch.log((q_idx - kv_idx).float())

    def forward(self, x, block_mask=None):
        b, s, d = x.shape
        # Each its own buffer: compiled on CUDA, torch 2.11's flex lowering refuses Q, K and V that are
        # views of one buffer ("Unsupported for now if query, key, value are the same buffer").
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2).contiguous()
                   for t in self.qkv(x).chunk(3, -1))
        options = {"BACKEND": self.kernel_backend} if self.kernel_backend else None
        o = flex_attention(q, k, v, score_mod=self.bad_score_mod if self.bad else self.score_mod, block_mask=block_mask,
                           kernel_options=options)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


class Model(nn.Module):
    def __init__(self, layers, heads, bad_layer, d_model=32):
        super().__init__()
        self.layers = nn.ModuleList(FlexSelfAttention(d_model, heads, i == bad_layer) for i in range(layers))

    def forward(self, x, block_mask=None):
        for layer in self.layers:
            x = x + layer(x, block_mask)
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4, help="of d_model (Inductor's flex kernels need head_dim >= 16)")
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--passes", type=int, default=2, help="inference forward passes, or training steps with --train")
    p.add_argument("--bad-layer", type=int, default=-1)
    p.add_argument("--bad-step", type=int, default=-1, help="with --train: the step at which --bad-layer is bad")
    p.add_argument("--causal", action="store_true", help="a causal block mask")
    p.add_argument("--kernel-backend", default="", help="kernel_options BACKEND (TRITON, FLASH...): which flex kernel runs")
    p.add_argument("--train", action="store_true", help="train with AdamW (needs a GPU: FlexAttention's backward)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor's flex kernels)")
    p.add_argument("--print-outputs", action="store_true",
                   help="print each pass's output sum (or loss) and a fresh random draw as exact hex floats (tests)")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Model(args.layers, args.heads, args.bad_layer if not args.train else -1, args.d_model)
    for layer in model.layers:
        layer.kernel_backend = args.kernel_backend
    model = model.to(args.device, getattr(torch, args.dtype))
    run = torch.compile(model) if args.compile else model
    mask = None
    if args.causal:
        mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, args.seq, args.seq, device=args.device)
    if args.train:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for step in range(args.passes):
            for i, layer in enumerate(model.layers):
                layer.bad = step == args.bad_step and i == args.bad_layer
            x = torch.randn(2, args.seq, args.d_model, device=args.device, dtype=model.layers[0].qkv.weight.dtype)
            loss = run(x, mask).float().pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            shown = loss.item().hex() if args.print_outputs else f"{loss.item():.4f}"
            print(f"step {step}: loss {shown}", flush=True)
        return
    model.eval()
    with torch.no_grad():
        for i in range(args.passes):
            x = run(torch.randn(2, args.seq, args.d_model).to(args.device, model.layers[0].qkv.weight.dtype), mask)
            if args.print_outputs:  # the random draw shows nothing consumed the global generator
                print(f"pass {i}: {x.double().sum().item().hex()} {torch.rand(1).item().hex()}", flush=True)
                continue
            print(f"pass {i}: output finite: {bool(torch.isfinite(x).all())}", flush=True)


if __name__ == "__main__":
    main()
