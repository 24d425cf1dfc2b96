"""Attention over q, k and v sliced out of one fused projection, as most transformers do it: each is
a strided view into the projection's output at its own storage offset. The projection has one
extra leading column, so q sits one float into the buffer (4-byte aligned, not 16), the layout of
EFFICIENT's misaligned-read report (pytorch#183484). Trains a few steps on the CPU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

HEADS, DIM = 2, 8
EMBED = HEADS * DIM


class FusedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(EMBED, 1 + 3 * EMBED)  # column 0 is unused: it puts q at offset 1
        self.out = nn.Linear(EMBED, EMBED)

    def forward(self, x):
        b, s, _ = x.shape
        y = self.qkv(x)
        heads = lambda t: t.view(b, s, HEADS, DIM).transpose(1, 2)  # noqa: E731  views, no copy
        q, k, v = (heads(y[..., 1 + i * EMBED:1 + (i + 1) * EMBED]) for i in range(3))
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).reshape(b, s, EMBED))


torch.manual_seed(0)
model = nn.Sequential(FusedAttention())
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(2):
    loss = model(torch.randn(2, 5, EMBED)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4g}", flush=True)
