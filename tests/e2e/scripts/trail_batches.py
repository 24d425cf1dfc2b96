"""A model whose forward takes the whole batch, as Lightning's training_step routed through the
module's forward, or `model(batch)` with a dict, does: `forward(batch)` with --batch list ([x, y])
or dict ({"x": x, "y": y}), returning a dict with the loss. For `nanprov run --trail`'s tests of
what a module receives, and of attention nanprov does not check.

Its first block's attention is linear attention (elu(q)+1 feature maps, no softmax): no attention
op nanprov checks runs in it, and only its name says it is attention. Its second block's attention
is SDPA, which nanprov checks. With --places 2 the first block also has a second LinearAttention
(`xattn`), so two places share one class.

At --fault-step one fault is planted:
  data   a NaN in the batch's x: it came from outside any module;
  embed  embed's weight becomes 3e38: its output overflows, from finite inputs;
  attn   blocks.0.attn's q and k are scaled by 1e30: its own arithmetic (not a module) makes
         Inf/Inf = NaN, from finite inputs.
With --oracle, plain-PyTorch hooks (nothing of nanprov's), walking the nested batch themselves,
find the answer and print it:
  oracle: step S phase fwd first PATH inputs finite|non-finite
the first module call (inner modules end first) whose output was non-finite, and whether every
tensor it received was finite; the outermost module's path is "-".
Each step prints its loss exactly (repr), so two runs compare bit for bit.
"""
import argparse
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearAttention(nn.Module):
    """Katharopoulos et al.'s linear attention: softmax(q kᵀ) replaced by feature maps, so no
    softmax and no attention op."""

    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.gain = 1.0

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k = F.elu(q * self.gain) + 1, F.elu(k * self.gain) + 1
        z = q @ k.sum(dim=-2, keepdim=True).transpose(-2, -1)
        return (q @ (k.transpose(-2, -1) @ v)) / z


class SdpaAttention(nn.Module):
    def __init__(self, d, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d, attn, xattn=None):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = attn
        self.xattn = xattn
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln(x))
        if self.xattn is not None:
            x = x + self.xattn(x)
        return x + self.mlp(x)


class Net(nn.Module):
    def __init__(self, d=16, channels=4, places=1):
        super().__init__()
        self.embed = nn.Linear(channels, d)
        self.blocks = nn.ModuleList([Block(d, LinearAttention(d), LinearAttention(d) if places > 1 else None),
                                     Block(d, SdpaAttention(d))])
        self.head = nn.Linear(d, channels)

    def forward(self, batch):
        x, y = (batch["x"], batch["y"]) if isinstance(batch, dict) else batch
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        out = self.head(h)
        return {"loss": (out - y).square().mean(), "out": out}


def tensors_in(value):
    """Every tensor in a value, however nested (the oracle's own walk)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    if dataclasses.is_dataclass(value):
        return [t for f in dataclasses.fields(value) for t in tensors_in(getattr(value, f.name))]
    return []


class Oracle:
    """The first module call whose output went non-finite, and what it received."""

    def __init__(self, model):
        self.step = 0
        self.found = False
        for name, module in model.named_modules():
            module.register_forward_hook(lambda m, args, kwargs, out, name=name: self.forward(name or "-", args, kwargs, out),
                                         with_kwargs=True)

    @staticmethod
    def finite(tensors):
        return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())

    def forward(self, name, args, kwargs, out):
        if self.found or self.finite(tensors_in(out)):
            return
        self.found = True
        received = tensors_in(args) + tensors_in(kwargs)
        inputs = "finite" if received and self.finite(received) else "non-finite"
        print(f"oracle: step {self.step} phase fwd first {name} inputs {inputs}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", choices=["list", "dict"], default="list")
    p.add_argument("--fault", choices=["none", "data", "embed", "attn"], default="none")
    p.add_argument("--fault-step", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--places", type=int, default=1, help="2: a second LinearAttention in the first block")
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(places=args.places)
    oracle = Oracle(model) if args.oracle else None
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    attn = model.blocks[0].attn
    for step in range(args.steps):
        if oracle:
            oracle.step = step
        x, y = torch.randn(2, 8, 4), torch.randn(2, 8, 4)
        if step == args.fault_step:
            if args.fault == "data":
                x[0, 3, 1] = float("nan")
            elif args.fault == "embed":
                with torch.no_grad():
                    model.embed.weight.fill_(3e38)
            elif args.fault == "attn":
                attn.gain = 1e30
        batch = {"x": x, "y": y} if args.batch == "dict" else [x, y]
        loss = model(batch)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item()!r}", flush=True)


if __name__ == "__main__":
    main()
