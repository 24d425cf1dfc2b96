"""A CLIP-like image tower as open_clip builds its VisionTransformer: a convolution stem (an
nn.Conv2d patch embedding, `conv1`), a class token and positional embedding added in plain code,
a LayerNorm `ln_pre`, then residual attention blocks (nn.MultiheadAttention with
need_weights=False, so SDPA; open_clip's `ls_1` LayerScale is an nn.Identity), `ln_post` and a
projection; trained as CLIP is, against random text features, with a contrastive loss that is a
module of its own (`ClipLoss`, as open_clip's): its backward receives a finite gradient (1.0) even
when its inputs were NaN. For `nanprov run --trail` and `--probe-module`.

At --fault-step one fault is planted:
  data      a NaN in the batch's images: it came with the data, before any module;
  conv      conv1's weight becomes 3e38: the stem's output overflows, from finite images;
  logits    (--attn hand) from that step on, the first block's hand-written attention scales its
            scores 1e13 times more each step: the logits the module computes reach 1e13, 1e26,
            then overflow (NaN two steps after the fault) while its input stays small.
--attn hand replaces nn.MultiheadAttention by a hand-written module, `HandAttention`, whose softmax
runs over the keys of transposed scores (k qᵀ, softmax over dim -2): attention nanprov does not
recognise, so --probe-module is the way to check it. --args qkv gives it Q, K and V as arguments
([B, H, S, D], projected by the block), --args x its hidden states ([B, S, E], projected inside).

With --oracle, plain-PyTorch hooks (nothing of nanprov's) print the first module call whose output
went non-finite (inner modules end first) and whether what it received was finite:
  oracle: step S phase fwd first PATH inputs finite|non-finite
and, with --attn hand, each step's largest score the first block's softmax consumed:
  oracle: step S logits L
Each step prints its loss exactly (repr), so two runs compare bit for bit.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class HandAttention(nn.Module):
    """softmax over the keys of k qᵀ (dim -2), then its transpose times V."""

    def __init__(self, width, heads, takes):
        super().__init__()
        self.heads, self.takes = heads, takes
        self.qkv = nn.Linear(width, 3 * width) if takes == "x" else None
        self.gain = 1.0
        self.peak = None  # the oracle's: the largest score of the last call (logits are read above 0: masks fill below)

    def forward(self, q, k=None, v=None):
        if self.qkv is not None:
            b, s, e = q.shape
            q, k, v = (t.view(b, s, self.heads, e // self.heads).transpose(1, 2) for t in self.qkv(q).chunk(3, dim=-1))
        scores = (k @ q.transpose(-2, -1)) * (q.shape[-1] ** -0.5 * self.gain)  # [B, H, keys, queries]
        self.peak = scores.detach().max().item()
        p = scores.softmax(dim=-2)
        o = p.transpose(-2, -1) @ v
        if self.qkv is not None:
            o = o.transpose(1, 2).reshape(o.shape[0], o.shape[2], -1)
        return o


class Block(nn.Module):
    def __init__(self, width, heads, attn, args):
        super().__init__()
        self.heads, self.args = heads, args
        self.ln_1 = nn.LayerNorm(width)
        if attn == "mha":
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        else:
            self.attn = HandAttention(width, heads, args)
            self.in_proj = nn.Linear(width, 3 * width) if args == "qkv" else None
            self.out_proj = nn.Linear(width, width)
        self.ls_1 = nn.Identity()
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def attention(self, x):
        if isinstance(self.attn, nn.MultiheadAttention):
            return self.attn(x, x, x, need_weights=False)[0]
        if self.in_proj is None:
            return self.out_proj(self.attn(x))
        b, s, e = x.shape
        q, k, v = (t.view(b, s, self.heads, e // self.heads).transpose(1, 2) for t in self.in_proj(x).chunk(3, dim=-1))
        o = self.attn(q, k, v)
        return self.out_proj(o.transpose(1, 2).reshape(b, s, e))

    def forward(self, x):
        x = x + self.ls_1(self.attention(self.ln_1(x)))
        return x + self.mlp(self.ln_2(x))


class VisionTower(nn.Module):
    def __init__(self, image=16, patch=4, width=32, heads=2, layers=2, out=8, attn="mha", args="qkv"):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(width) * width ** -0.5)
        self.positional_embedding = nn.Parameter(torch.randn((image // patch) ** 2 + 1, width) * width ** -0.5)
        self.ln_pre = nn.LayerNorm(width)
        self.blocks = nn.ModuleList([Block(width, heads, attn, args) for _ in range(layers)])
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(torch.randn(width, out) * width ** -0.5)

    def forward(self, x):
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        x = torch.cat([self.class_embedding.expand(x.shape[0], 1, -1), x], dim=1)
        x = x + self.positional_embedding
        x = self.ln_pre(x)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x[:, 0]) @ self.proj


class ClipLoss(nn.Module):
    """open_clip's contrastive loss: cross-entropy over scaled cosine similarities, both ways."""

    def __init__(self):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, image_features, text_features):
        image_features = image_features / image_features.norm(dim=-1, keepdim=True)
        logits = self.logit_scale.exp() * image_features @ text_features.T
        labels = torch.arange(logits.shape[0])
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


class Oracle:
    """The first module call whose output went non-finite, and whether what it received was finite."""

    def __init__(self, model):
        self.step = 0
        self.found = False
        for name, module in model.named_modules():
            module.register_forward_hook(lambda m, args, out, name=name: self.forward(name or "-", args, out))

    def forward(self, name, args, out):
        outs = [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]
        if self.found or all(bool(torch.isfinite(t).all()) for t in outs):
            return
        self.found = True
        received = [a for a in args if isinstance(a, torch.Tensor)]
        inputs = "finite" if received and all(bool(torch.isfinite(t).all()) for t in received) else "non-finite"
        print(f"oracle: step {self.step} phase fwd first {name} inputs {inputs}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fault", choices=["none", "data", "conv", "logits"], default="none")
    p.add_argument("--fault-step", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--attn", choices=["mha", "hand"], default="mha")
    p.add_argument("--args", choices=["qkv", "x"], default="qkv", help="what HandAttention is handed")
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = VisionTower(attn=args.attn, args=args.args)
    oracle = Oracle(model) if args.oracle else None
    clip_loss = ClipLoss()
    opt = torch.optim.SGD([*model.parameters(), *clip_loss.parameters()], lr=1e-2)
    first_attn = model.blocks[0].attn
    for step in range(args.steps):
        if oracle:
            oracle.step = step
        images, texts = torch.randn(2, 3, 16, 16), F.normalize(torch.randn(2, 8), dim=-1)
        if step == args.fault_step:
            if args.fault == "data":
                images[1, 0, 5, 7] = float("nan")
            elif args.fault == "conv":
                with torch.no_grad():
                    model.conv1.weight.fill_(3e38)
        if args.fault == "logits" and step >= args.fault_step:
            first_attn.gain *= 1e13
        loss = clip_loss(model(images), texts)
        if oracle and args.attn == "hand":
            print(f"oracle: step {step} logits {first_attn.peak!r}", flush=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item()!r}", flush=True)


if __name__ == "__main__":
    main()
