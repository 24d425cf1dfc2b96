"""Attention whose dQ is changed in place after the call: q goes through an identity autograd
Function whose backward doubles its incoming gradient with mul_, and that gradient is the very dQ
tensor the attention backward made (and nanprov holds for its check). A check that runs after
that backward reads the doubled dQ, not the call's. Trains a few steps on the CPU and prints each
loss in full, so runs can be compared bit for bit."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HEADS, DIM = 2, 8
EMBED = HEADS * DIM


class DoubleGradInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad.mul_(2)  # in place, on the dQ autograd hands over


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(EMBED, 3 * EMBED)
        self.out = nn.Linear(EMBED, EMBED)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, HEADS, DIM).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        o = F.scaled_dot_product_attention(DoubleGradInPlace.apply(q), k, v)
        return self.out(o.transpose(1, 2).reshape(b, s, EMBED))


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
model = nn.Sequential(Attention())
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(steps):
    loss = model(torch.randn(2, 5, EMBED)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item()!r}", flush=True)
