"""Training with hand-written attention, as research code often has it: softmax(q k^T / sqrt(d)) v
in the model's own module, no SDPA. nanprov checks it by default (op softmax_attention, backend
plain_softmax), with its real Q, K, V, the scores S, the probabilities P and O.
A sensor glitch (--glitch-step) makes the logits overflow float32 in the first layer."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class HandAttention(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return scores.softmax(dim=-1) @ v


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.attn = HandAttention()
        self.out = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        o = self.attn(q, k, v)
        return self.norm(x + self.out(o.transpose(1, 2).reshape(b, s, d)))


class Model(nn.Module):
    def __init__(self, channels=8, d_model=32, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Linear(channels, d_model)
        self.layers = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.head = nn.Linear(d_model, channels)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--glitch-step", type=int, default=-1)
    p.add_argument("--print-losses", action="store_true", help="print each loss as an exact hex float")
    p.add_argument("--speed", action="store_true", help="print steady-state steps/s (steps after the first)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.compile:
        model = torch.compile(model)
    started = None
    for step in range(args.steps):
        if step == 1:
            started = time.perf_counter()
        x = torch.randn(4, 16, 8)
        if step == args.glitch_step:
            x[0] *= 1e20  # one corrupted sample, as a faulty sensor gives
        loss = F.mse_loss(model(x), torch.zeros_like(x))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if not args.speed:
            print(f"step {step}: loss {loss.item().hex() if args.print_losses else format(loss.item(), '.4g')}", flush=True)
    if args.speed and started is not None:
        print(f"steps_per_sec {(args.steps - 1) / (time.perf_counter() - started):.3f}", flush=True)


if __name__ == "__main__":
    main()
