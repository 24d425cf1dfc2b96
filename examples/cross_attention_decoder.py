"""A decoder step that attends with one query per sequence to an encoder memory, as generation-time
cross-attention does: scaled_dot_product_attention with s_q = 1 and s_kv = --memory, no mask.

The memory's keys share one large component and the query points the other way, so every logit of
the row is far below zero and its log-sum-exp sits below about -90. On Hopper with cuDNN 9.19, the
default SDPA dispatch (cuDNN) then writes NaN into every element of dK and dV in the backward, while
dQ and O stay finite and the EFFICIENT and MATH backends are right (cudnn-frontend#1072). Measured on
the H200, it takes one sequence and one head (the defaults): s_q = 2, or 4 sequences of 4 heads, are
clean. nanprov names that backward call, its kernel, and the known issue; on the CPU the same
training is clean.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class CrossAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        # Projections start as the identity, so the shared component survives into Q and K.
        for proj in (self.q, self.k, self.v):
            nn.init.eye_(proj.weight)

    def split(self, x):
        b, s, d = x.shape
        return x.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, query, memory):
        q, k, v = self.split(self.q(query)), self.split(self.k(memory)), self.split(self.v(memory))
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).flatten(2))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--memory", type=int, default=128, help="keys in the encoder memory (s_kv)")
    p.add_argument("--queries", type=int, default=1, help="query positions (s_q)")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--shared", type=float, default=30.0,
                   help="size of the component every key shares (the query holds its opposite)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    model = CrossAttention(args.d_model, args.heads).to(args.device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    head_dim = args.d_model // args.heads
    # The same unit direction in every head's slice: q·k / sqrt(head_dim) is then about
    # -shared² / sqrt(head_dim) for every key (-112 at the defaults, a row LSE near -108).
    u = torch.ones(args.d_model, device=args.device) / head_dim ** 0.5
    for step in range(args.steps):
        memory = args.shared * u + 0.1 * torch.randn(args.batch, args.memory, args.d_model, device=args.device)
        query = -args.shared * u + 0.1 * torch.randn(args.batch, args.queries, args.d_model, device=args.device)
        target = torch.randn(args.batch, args.queries, args.d_model, device=args.device)
        out = model(query.to(dtype), memory.to(dtype))
        loss = F.mse_loss(out.float(), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
