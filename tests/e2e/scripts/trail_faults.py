"""A small GPT-like model (nanoGPT's module names) that goes non-finite outside attention, for
`nanprov run --trail`'s tests. At --fault-step one fault is planted:
  ln            h.0.ln_1's weight becomes 3e38: its output overflows (forward), from finite inputs;
  mlp           h.0.mlp.c_fc's weight becomes 3e38: the MLP's first Linear overflows (forward);
  act-backward  h.0.mlp.act's backward (a hand-written autograd.Function) turns the finite gradient
                it receives into Inf; its forward is a plain GELU (not with --act gelu).
With --oracle, plain-PyTorch hooks (nothing of nanprov's) find the answer and print it:
  oracle: step S phase fwd|bwd module PATH
the first module call whose output was non-finite from finite inputs (forward), or whose backward
sent a non-finite gradient to an input while every gradient it received was finite (backward).
--checkpoint recomputes each block in the backward (torch.utils.checkpoint); the oracle's
forward hooks then also see the recompute, whose values are the original forward's.
--device cuda --dtype bfloat16 --lr LARGE is the GPU case: a bf16 model that diverges by itself.
Each step prints its loss exactly (repr), so two runs compare bit for bit.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class BlowUpBackward(torch.autograd.Function):
    """GELU forward; the backward multiplies the gradient by `scale` (1 normally, 1e39 at the fault:
    float32 Inf from finite gradients)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return F.gelu(x)

    @staticmethod
    def backward(ctx, grad):
        # GELU's derivative written out, so that torch.compile traces it into the compiled
        # backward instead of breaking the graph here.
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1 + torch.erf(x * 0.7071067811865476))
        pdf = torch.exp(-0.5 * x * x) * 0.3989422804014327
        return grad * (cdf + x * pdf) * ctx.scale, None


class Act(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0

    def forward(self, x):
        return BlowUpBackward.apply(x, self.scale)


class MLP(nn.Module):
    def __init__(self, d, act):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.act = {"blow-up": Act, "gelu": nn.GELU, "swiglu": nn.SiLU}[act]()
        # SwiGLU (Llama's MLP): the activation's output meets c_up's in a product, which Inductor
        # fuses, keeping the activation in fp32 where the model is bf16.
        self.c_up = nn.Linear(d, 4 * d) if act == "swiglu" else None
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.act(self.c_fc(x))
        return self.c_proj(h * self.c_up(x) if self.c_up is not None else h)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d, heads, act):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d, act)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, d=16, heads=2, layers=2, channels=4, checkpoint=None, act="blow-up"):
        super().__init__()
        self.checkpoint = checkpoint  # None, "reentrant" or "non-reentrant": each block recomputed in backward
        self.transformer = nn.ModuleDict(dict(wte=nn.Linear(channels, d), h=nn.ModuleList(Block(d, heads, act) for _ in range(layers)),
                                              ln_f=nn.LayerNorm(d)))
        self.head = nn.Linear(d, channels)

    def forward(self, x):
        h = self.transformer.wte(x)
        for block in self.transformer.h:
            if self.checkpoint:
                from torch.utils.checkpoint import checkpoint

                h = checkpoint(block, h, use_reentrant=self.checkpoint == "reentrant")
            else:
                h = block(h)
        return self.head(self.transformer.ln_f(h))


class Oracle:
    """The first module call that made a non-finite value, found with plain module and tensor hooks."""

    def __init__(self, model):
        self.step = 0
        self.found = None
        for name, module in model.named_modules():
            module.register_forward_hook(lambda m, args, out, name=name: self.forward(name, args, out))

    @staticmethod
    def finite(tensors):
        return all(bool(torch.isfinite(t).all()) for t in tensors)

    def note(self, phase, name):
        if self.found is None:
            self.found = (self.step, phase, name)
            print(f"oracle: step {self.step} phase {phase} module {name}", flush=True)

    def forward(self, name, args, out):
        outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
        ins = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        if not self.finite(outs) and self.finite(ins):
            self.note("fwd", name)
        if not torch.is_grad_enabled():
            return
        received = []
        sends = [a for a in ins if a.requires_grad]
        if not sends:
            return
        for o in outs:
            if o.requires_grad:
                o.register_hook(lambda g: received.append(g.detach().clone()))
        for a in sends:
            a.register_hook(lambda g, name=name: self.note("bwd", name) if self.finite(received) and not self.finite([g]) else None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fault", choices=["none", "ln", "mlp", "act-backward"], default="none")
    p.add_argument("--fault-step", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--oracle", action="store_true")
    p.add_argument("--checkpoint", choices=["reentrant", "non-reentrant"])
    p.add_argument("--compile", action="store_true", help="train torch.compile(model)")
    p.add_argument("--compile-blocks", action="store_true",
                   help="compile each block (block.compile()): one graph serves every block")
    p.add_argument("--act", choices=["blow-up", "gelu", "swiglu"], default="blow-up",
                   help="the MLP's activation: the hand-written Function (a graph break under torch.compile), "
                        "nn.GELU, or Llama's SwiGLU (nn.SiLU times a second Linear)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--lr", type=float, default=1e-2, help="large: the training diverges by itself, no fault needed")
    p.add_argument("--d-model", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = GPT(d=args.d_model, checkpoint=args.checkpoint, act=args.act).to(args.device, dtype)
    oracle = Oracle(model) if args.oracle else None
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    run = torch.compile(model) if args.compile else model
    if args.compile_blocks:
        for b in model.transformer.h:
            b.compile()
    block = model.transformer.h[0]
    for step in range(args.steps):
        if oracle:
            oracle.step = step
        if step == args.fault_step:
            with torch.no_grad():
                if args.fault == "ln":
                    block.ln_1.weight.fill_(3e38)
                elif args.fault == "mlp":
                    block.mlp.c_fc.weight.fill_(3e38)
            if args.fault == "act-backward":
                block.mlp.act.scale = 1e39
        elif args.act == "blow-up":
            block.mlp.act.scale = 1.0
        x = torch.randn(2, 8, 4).to(args.device, dtype)
        loss = (run(x) - x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        # The parameters' sum in float64 too: a bf16 loss is too coarse to show a change in rounding.
        weights = sum(p.detach().double().sum() for p in model.parameters()).item()
        print(f"step {step}: loss {loss.item()!r} weights {weights!r}", flush=True)


if __name__ == "__main__":
    main()
