"""Bucketed attention over padded batches with nn.MultiheadAttention, as many users write it: a banded
attn_mask (each query sees keys within --band of itself) plus a key_padding_mask for the padding, and
the default need_weights=True, which computes softmax(q kᵀ + mask) v in plain ops, not SDPA.

From --pad-step on, batches hold sequences shorter than the bucket. A padded query far enough past
its sequence's end has every key in its band masked: a plain softmax gives NaN for that row
(pytorch#41508). The loss reads the valid positions only, so it stays finite, while the NaN rows
reach every in_proj gradient through the backward (NaN · 0). nanprov names that MultiheadAttention
call; replay says the fully masked rows did it.

--oracle adds plain-PyTorch forward hooks on every module and prints the first module whose output
went non-finite from finite inputs: the ground truth the end-to-end tests compare nanprov with.
"""
import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d_model, heads, dropout):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, heads, dropout=dropout, batch_first=True)
        self.norm = nn.LayerNorm(d_model)
        self.ff = nn.Linear(d_model, d_model)

    def forward(self, x, band, padding):
        o, _ = self.attn(x, x, x, attn_mask=band, key_padding_mask=padding)  # need_weights=True
        return self.norm(x + self.ff(torch.relu(o)))


class Model(nn.Module):
    def __init__(self, channels, d_model, heads, layers, dropout):
        super().__init__()
        self.embed = nn.Linear(channels, d_model)
        self.layers = nn.ModuleList(Block(d_model, heads, dropout) for _ in range(layers))
        self.head = nn.Linear(d_model, channels)

    def forward(self, x, band, padding):
        h = self.embed(x)
        for layer in self.layers:
            # Padded positions are zeroed between layers, as usual: the next layer's keys stay finite.
            h = layer(h, band, padding).masked_fill(padding.unsqueeze(-1), 0.0)
        return self.head(h)


def install_oracle(model, steps):
    """Forward hooks on every module: the first whose inputs were finite and output was not."""
    found = []

    def finite(value):
        tensors = [value] if isinstance(value, torch.Tensor) else [t for t in value if isinstance(t, torch.Tensor)] \
            if isinstance(value, (tuple, list)) else []
        return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())

    for name, module in model.named_modules():
        def hook(mod, args, output, name=name):
            if not found and finite(args) and not finite(output):
                found.append(f"oracle: first non-finite forward output: {name} at step {steps[0]}")
                print(found[0], flush=True)
        if name:
            module.register_forward_hook(hook)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--band", type=int, default=2)
    p.add_argument("--pad-step", type=int, default=2, help="the first step whose batch holds short sequences")
    p.add_argument("--dropout", type=float, default=0.0, help="the attention's dropout (pytorch#152028 needs it)")
    p.add_argument("--oracle", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--print-losses", action="store_true", help="print each loss as an exact hex float")
    args = p.parse_args()
    torch.manual_seed(0)
    channels = 8
    model = Model(channels, 32, 4, args.layers, args.dropout).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = [0]
    if args.oracle:
        install_oracle(model, steps)
    positions = torch.arange(args.seq, device=args.device)
    band = (positions[None, :] - positions[:, None]).abs() > args.band  # True: masked
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        steps[0] = step
        full = [args.seq] * 4
        lengths = torch.tensor(full if step < args.pad_step else [args.seq, args.seq * 3 // 4, args.seq // 2, 5],
                               device=args.device)
        padding = positions[None, :] >= lengths[:, None]  # True: a padded key
        x = torch.randn(4, args.seq, channels, generator=gen).to(args.device)
        out = model(x, band, padding)
        valid = ~padding
        loss = (out[valid] - x[valid]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item().hex() if args.print_losses else f'{loss.item():.4f}'}", flush=True)


if __name__ == "__main__":
    main()
