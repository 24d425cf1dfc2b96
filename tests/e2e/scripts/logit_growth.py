"""A nanoGPT-style model whose attention logits really grow (issue 50's trend test). Two blocks of
hand-written causal attention (q @ kᵀ / sqrt(d), masked_fill, softmax, @ v) learn a copy task with
AdamW; the attention is computed in --attn-dtype (float16: as a float16 pipeline, or autocast,
computes it). At a high learning rate (--lr 0.2) the query and key weights grow until the scores
overflow float16 and the softmax makes NaN; at a low one (--lr 0.01) the model learns the task and
its logits level off far below.

--truth prints, each step, the largest finite score each layer's softmax received (the largest
logit; a mask's fills lie below it): the ground truth nanprov's trend is compared with. --oracle prints the first module whose forward output went
non-finite from finite inputs (plain-PyTorch forward hooks). --print-losses prints each loss as an
exact hex float. --device cuda trains on the GPU (batches drawn on the CPU, then moved)."""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
from mha_padding import install_oracle  # noqa: E402

VOCAB, DIM, HEADS, DEPTH, SEQ, BATCH = 64, 64, 4, 2, 32, 8


class CausalAttention(nn.Module):
    def __init__(self, dtype, largest):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.dtype, self.largest = dtype, largest

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2).to(self.dtype) for t in self.c_attn(x).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        if self.largest is not None:
            finite = att.detach()[torch.isfinite(att.detach())]
            self.largest.append(float(finite.max()) if finite.numel() else 0.0)
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C).float()
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, dtype, largest):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(DIM), CausalAttention(dtype, largest)
        self.ln_2, self.mlp = nn.LayerNorm(DIM), nn.Linear(DIM, DIM)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, dtype, truth):
        super().__init__()
        self.largest = [[] for _ in range(DEPTH)] if truth else [None] * DEPTH
        self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
        self.h = nn.ModuleList(Block(dtype, self.largest[i]) for i in range(DEPTH))
        self.ln_f, self.lm_head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--attn-dtype", choices=("float16", "bfloat16", "float32"), default="float16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--truth", action="store_true")
    p.add_argument("--oracle", action="store_true")
    p.add_argument("--print-losses", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT(getattr(torch, args.attn_dtype), args.truth).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    steps = [0]
    if args.oracle:
        install_oracle(model, steps)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        steps[0] = step
        half = torch.randint(0, VOCAB, (BATCH, SEQ // 2 + 1), generator=gen)
        tokens = torch.cat([half, half], dim=1)[:, : SEQ + 1]  # the second half repeats the first
        tokens = tokens.to(args.device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.truth:
            for layer, seen in enumerate(model.largest):
                print(f"truth: step {step} layer {layer} largest score {max(seen)!r}", flush=True)
                seen.clear()
        value = loss.item()
        print(f"step {step}: loss {value.hex() if args.print_losses else format(value, '.4g')}", flush=True)


if __name__ == "__main__":
    main()
