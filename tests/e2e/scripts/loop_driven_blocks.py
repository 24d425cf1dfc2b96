"""Training whose transformer blocks are not all reached through one root module's forward, as
third-party code holds and drives them (--holder):

  forward      a GPT whose forward calls its blocks (model.transformer.h, an nn.ModuleList)
  loop         the same GPT, its blocks called one by one by the training loop (litgpt users'
               `for block in model.transformer.h: x = block(x)`)
  modulelist   timm-style blocks in a bare nn.ModuleList, beside a separate stem and head, all
               driven by the loop
  list         blocks in a plain Python list the loop iterates, beside a stem and head
  list-attr    a model holding its blocks in a plain Python list attribute (unregistered)

At --glitch-step the --glitch-layer'th block's attention scales its Q and K by 1e30, so its logits
overflow float32 there: the first non-finite values are made in that block's attention.

--oracle prints the ground truth from plain-PyTorch hooks, with each module's full name as the
script built it (the path from the module holding it, a container's name and index first where a
plain container or the loop holds it):
  oracle: first non-finite forward output: <module> at step <n>
  oracle: non-finite attention layers: <n>        (attention modules that saw a non-finite value)
  oracle: non-finite gradients at step <n>: <names, comma-separated>
  oracle: optimizer steps: <n>
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.glitch = False

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        if self.glitch:
            q, k = q * 1e30, k * 1e30
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.norm_1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.norm_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm_1(x))
        return x + self.mlp(self.norm_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), h=nn.ModuleList(Block(d, heads) for _ in range(layers)), ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


class ListModel(nn.Module):
    """Blocks in a plain list attribute: the model's parameters() misses them, its forward runs them."""

    def __init__(self, vocab, d, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = [Block(d, heads) for _ in range(layers)]
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def named(pieces):
    """{module: full name} over named pieces ('' for the model itself)."""
    return {m: prefix + ("." if prefix and n else "") + n for prefix, piece in pieces.items() for n, m in piece.named_modules()}


def finite(value):
    tensors = [value] if isinstance(value, torch.Tensor) else [t for t in value if isinstance(t, torch.Tensor)] \
        if isinstance(value, (tuple, list)) else []
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def install_oracle(names, step):
    """Forward hooks on every module, and a gradient hook on each attention's output."""
    first, bad_layers = [], set()
    for module, name in names.items():
        def hook(mod, args, output, name=name):
            if not first and finite(args) and not finite(output):
                first.append(name)
                print(f"oracle: first non-finite forward output: {name} at step {step[0]}", flush=True)
            if isinstance(mod, Attention):
                if not (finite(args) and finite(output)):
                    bad_layers.add(name)
                if output.requires_grad:
                    output.register_hook(lambda g: bad_layers.add(name) if not finite(g) else None)
        if name:
            module.register_forward_hook(hook)
    return bad_layers


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--holder", choices=("forward", "loop", "modulelist", "list", "list-attr"), default="loop")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--glitch-step", type=int, default=-1)
    p.add_argument("--glitch-layer", type=int, default=2)
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    vocab, d, heads, seq = 32, 16, 2, 12
    # The training holds its pieces as users do: a model, or a stem, blocks and a head of its own.
    model = stem = head = None
    if args.holder in ("forward", "loop"):
        model = GPT(vocab, d, heads, args.layers)
        blocks = model.transformer.h
        names = named({"": model})
    elif args.holder == "list-attr":
        model = ListModel(vocab, d, heads, args.layers)
        blocks = model.blocks
        names = named({"": model, **{f"blocks.{i}": b for i, b in enumerate(blocks)}})
    else:
        stem, head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
        if args.holder == "modulelist":
            blocks = nn.ModuleList(Block(d, heads) for _ in range(args.layers))
            names = named({"stem": stem, "blocks": blocks, "head": head})
        else:
            blocks = [Block(d, heads) for _ in range(args.layers)]
            names = named({"stem": stem, "head": head, **{f"blocks.{i}": b for i, b in enumerate(blocks)}})
    params = list({id(p): p for m in names for p in m.parameters()}.values())
    param_names = {id(p): n for m, prefix in names.items() for n, p in m.named_parameters(recurse=False)
                   for n in [f"{prefix}.{n}" if prefix else n]}
    opt = torch.optim.AdamW(params, lr=1e-3)
    step = [0]
    steps_taken = [0]
    opt.register_step_post_hook(lambda *_: steps_taken.__setitem__(0, steps_taken[0] + 1))
    bad_layers = install_oracle(names, step) if args.oracle else set()
    for step[0] in range(args.steps):
        idx = torch.randint(0, vocab, (4, seq))
        blocks[args.glitch_layer].attn.glitch = step[0] == args.glitch_step
        if args.holder in ("forward", "list-attr"):
            logits = model(idx)
        elif args.holder == "loop":
            x = model.transformer.wte(idx)
            for block in model.transformer.h:
                x = block(x)
            logits = model.lm_head(model.transformer.ln_f(x))
        else:
            x = stem(idx)
            for blk in blocks:
                x = blk(x)
            logits = head(x)
        loss = F.cross_entropy(logits.flatten(0, 1), idx.roll(-1, dims=1).flatten())
        opt.zero_grad()
        loss.backward()
        if args.oracle and step[0] == args.glitch_step:
            bad = [param_names[id(p)] for p in params if p.grad is not None and not finite(p.grad)]
            print(f"oracle: non-finite gradients at step {step[0]}: {','.join(bad)}", flush=True)
        opt.step()
        print(f"step {step[0]}: loss {loss.item():.4g}", flush=True)
        if step[0] == args.glitch_step:
            break  # the weights are NaN from here: the layers counted are the glitch step's
    if args.oracle:
        print(f"oracle: non-finite attention layers: {len(bad_layers)}", flush=True)
        print(f"oracle: optimizer steps: {steps_taken[0]}", flush=True)


if __name__ == "__main__":
    main()
