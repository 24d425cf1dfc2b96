"""Attention written by hand in every notation third-party code uses, trained on the CPU with a
real fault at one step, for nanprov's default probes (no --probe-module). A two-block pre-norm
transformer whose attention module (`layers.N.attn`) computes softmax(q·kᵀ·scale + mask)·v as
--notation says:

  einsum-bhsd   einsum('bhid,bhjd->bhij'), softmax, einsum('bhij,bhjd->bhid')  (x-transformers)
  einsum-bshd   q, k, v as [B, S, H, D]: einsum('bihd,bjhd->bhij'), einsum('bhij,bjhd->bihd')
  einsum-folded heads folded into the batch: einsum('bqd,bkd->bqk'), einsum('bqk,bkd->bqd')
  einsum-mqa    one K/V head for all query heads: einsum('bhid,bjd->bhij'), einsum('bhij,bjd->bhid')
  einops        einops.einsum(q, k, 'b h i d, b h j d -> b h i j') and back
  matmul        torch.matmul(q, k.transpose(-2, -1)), F.softmax(..., dtype=torch.float32), .to(dtype)
  at            q @ k.mT, nn.Softmax(dim=-1), nn.Dropout(0.1), @ v
  bmm           heads folded into the batch: torch.bmm, Tensor.softmax, torch.bmm
  baddbmm       torch.baddbmm(bias, q, kᵀ, alpha=scale) with an additive mask, softmax, bmm
  masked        a causal masked_fill(-finfo.max) on a clone, F.softmax, dropout 0, @ v
  additive      a causal additive mask (-1e9) and a float32 upcast softmax, @ v
  unrecognised  scores by einsum, softmax, then P·V as a sum of products (no matmul): attention
                nanprov cannot check (its call has no end it can see)

--fault attention: at --glitch-step a bad update has multiplied layers.1.attn's q and k weights by
1e20, so its logits overflow float32 from finite q and k (the first non-finite values are made in
layers.1.attn, forward). --fault mlp: at --glitch-step layers.1.mlp's first weight is multiplied by
1e38, so that Linear's output overflows (made outside attention, after the last attention).

--oracle adds plain-PyTorch forward hooks on every module and prints the first module whose output
went non-finite from finite inputs, and the step. --print-losses prints each loss as an exact hex float."""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
from mha_padding import install_oracle  # noqa: E402

NOTATIONS = ("einsum-bhsd", "einsum-bshd", "einsum-folded", "einsum-mqa", "einops", "matmul", "at", "bmm", "baddbmm",
             "masked", "additive", "unrecognised")


class Attention(nn.Module):
    def __init__(self, dim, heads, notation):
        super().__init__()
        self.heads, self.head_dim, self.notation = heads, dim // heads, notation
        self.scale = self.head_dim ** -0.5
        kv_dim = self.head_dim if notation == "einsum-mqa" else dim
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, dim), nn.Linear(dim, kv_dim), nn.Linear(dim, kv_dim)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(0.1 if notation == "at" else 0.0)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, S, C = x.shape
        H, D = self.heads, self.head_dim
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        bshd = lambda t: t.view(B, S, -1, D)  # noqa: E731
        bhsd = lambda t: bshd(t).transpose(1, 2)  # noqa: E731
        folded = lambda t: bhsd(t).reshape(B * H, S, D)  # noqa: E731
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        n = self.notation
        if n == "einsum-bhsd":
            p = (torch.einsum("bhid,bhjd->bhij", bhsd(q), bhsd(k)) * self.scale).softmax(dim=-1)
            o = torch.einsum("bhij,bhjd->bhid", p, bhsd(v)).transpose(1, 2)
        elif n == "einsum-bshd":
            p = F.softmax(torch.einsum("bihd,bjhd->bhij", bshd(q), bshd(k)) * self.scale, dim=-1)
            o = torch.einsum("bhij,bjhd->bihd", p, bshd(v))
        elif n == "einsum-folded":
            p = (torch.einsum("bqd,bkd->bqk", folded(q), folded(k)) * self.scale).softmax(-1)
            o = torch.einsum("bqk,bkd->bqd", p, folded(v)).view(B, H, S, D).transpose(1, 2)
        elif n == "einsum-mqa":
            p = (torch.einsum("bhid,bjd->bhij", bhsd(q), k) * self.scale).softmax(dim=-1)
            o = torch.einsum("bhij,bjd->bhid", p, v).transpose(1, 2)
        elif n == "einops":
            import einops
            sim = einops.einsum(bhsd(q), bhsd(k), "b h i d, b h j d -> b h i j") * self.scale
            o = einops.einsum(sim.softmax(dim=-1), bhsd(v), "b h i j, b h j d -> b h i d").transpose(1, 2)
        elif n == "matmul":
            p = F.softmax(torch.matmul(bhsd(q), bhsd(k).transpose(-2, -1)) * self.scale, dim=-1, dtype=torch.float32)
            o = torch.matmul(p.to(q.dtype), bhsd(v)).transpose(1, 2)
        elif n == "at":
            o = (self.dropout(self.softmax(bhsd(q) @ bhsd(k).mT * self.scale)) @ bhsd(v)).transpose(1, 2)
        elif n == "bmm":
            p = (torch.bmm(folded(q), folded(k).transpose(1, 2)) / D ** 0.5).softmax(dim=-1)
            o = torch.bmm(p, folded(v)).view(B, H, S, D).transpose(1, 2)
        elif n == "baddbmm":
            mask = torch.zeros(S, S, device=x.device).masked_fill(causal, -1e4).expand(B * H, S, S)
            p = torch.baddbmm(mask, folded(q), folded(k).transpose(1, 2), alpha=self.scale).softmax(dim=-1)
            o = torch.bmm(p, folded(v)).view(B, H, S, D).transpose(1, 2)
        elif n == "masked":
            sim = (bhsd(q) @ bhsd(k).transpose(-1, -2) * self.scale).clone()
            sim = sim.masked_fill(causal, -torch.finfo(sim.dtype).max)
            o = (self.dropout(F.softmax(sim, dim=-1)) @ bhsd(v)).transpose(1, 2)
        elif n == "additive":
            bias = torch.zeros(S, S, device=x.device).masked_fill(causal, -1e9)
            sim = torch.einsum("bhid,bhjd->bhij", bhsd(q), bhsd(k)) * self.scale + bias
            o = (sim.float().softmax(dim=-1).to(q.dtype) @ bhsd(v)).transpose(1, 2)
        else:  # unrecognised: P·V without a matmul
            p = (torch.einsum("bhid,bhjd->bhij", bhsd(q), bhsd(k)) * self.scale).softmax(dim=-1)
            o = (p.unsqueeze(-1) * bhsd(v).unsqueeze(-3)).sum(-2).transpose(1, 2)
        return self.proj(o.reshape(B, S, C))


class Block(nn.Module):
    def __init__(self, dim, heads, notation):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads, notation)
        self.norm2, self.mlp = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, notation, vocab=50, dim=32, heads=4, depth=2, seq=12):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.layers = nn.ModuleList(Block(dim, heads, notation) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--notation", choices=NOTATIONS, required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--glitch-step", type=int, default=-1)
    p.add_argument("--fault", choices=("attention", "mlp"), default="attention")
    p.add_argument("--oracle", action="store_true")
    p.add_argument("--print-losses", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Model(args.notation)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    steps = [0]
    if args.oracle:
        install_oracle(model, steps)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        steps[0] = step
        if step == args.glitch_step:
            with torch.no_grad():  # a bad update
                if args.fault == "attention":
                    model.layers[1].attn.to_q.weight.mul_(1e20)
                    model.layers[1].attn.to_k.weight.mul_(1e20)
                else:
                    model.layers[1].mlp[0].weight.mul_(1e38)
        tokens = torch.randint(0, 50, (4, 12), generator=gen)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.item()
        print(f"step {step}: loss {value.hex() if args.print_losses else format(value, '.4g')}", flush=True)


if __name__ == "__main__":
    main()
