"""A clean training that steps its optimizer as users do (--optimizer), so the report's optimizer
step count can be compared with the `optimizer.step()` calls the loop made:

  sgd            torch.optim.SGD, zero_grad before each backward
  adamw          torch.optim.AdamW
  scheduler      AdamW under a OneCycleLR scheduler (it wraps optimizer.step)
  wrapper        a plain Python class holding an AdamW, whose own step() steps it
  lookahead      a Lookahead-style torch.optim.Optimizer subclass wrapping an SGD (both step)
  scaler         torch.amp.GradScaler's scaler.step(optimizer) under CPU autocast
  no-zero-grad   SGD with gradients set to None by hand, never zero_grad()
  accumulate     SGD stepped every second micro-batch (gradient accumulation)
  two            two optimizers, one for the body and one for the head, each stepping every step

--model attention trains a small SDPA transformer; --model mlp one with no attention at all, so
nothing but steps and gradients happen.

--oracle prints `oracle: optimizer steps: <n>`: the step() calls the loop made on its optimizer
(the most of either, with two), checked against the optimizers' own step post hooks.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, 2, d // 2).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        return x + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)


class Wrapper:
    """An optimizer wrapper that is no torch.optim.Optimizer (as some trainers write)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        self.optimizer.step()


class Lookahead(torch.optim.Optimizer):
    """A Lookahead-style optimizer: an Optimizer subclass whose step steps the one it wraps."""

    def __init__(self, base, alpha=0.5, k=2):
        self.base, self.alpha, self.k, self.count = base, alpha, k, 0
        super().__init__(base.param_groups, {})
        self.slow = [p.detach().clone() for g in base.param_groups for p in g["params"]]

    @torch.no_grad()
    def step(self, closure=None):
        self.base.step()
        self.count += 1
        if self.count % self.k == 0:
            for slow, p in zip(self.slow, (p for g in self.base.param_groups for p in g["params"])):
                slow.add_(p - slow, alpha=self.alpha)
                p.copy_(slow)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--optimizer", default="sgd",
                   choices=("sgd", "adamw", "scheduler", "wrapper", "lookahead", "scaler", "no-zero-grad", "accumulate", "two"))
    p.add_argument("--model", choices=("attention", "mlp"), default="attention")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    d = 16
    body = nn.Sequential(Attention(d), nn.LayerNorm(d)) if args.model == "attention" else nn.Sequential(nn.Linear(d, d), nn.GELU())
    head = nn.Linear(d, 1)
    params = list(body.parameters()) + list(head.parameters())
    scaler = None
    if args.optimizer in ("sgd", "no-zero-grad", "accumulate"):
        optimizers = [torch.optim.SGD(params, lr=1e-2)]
    elif args.optimizer == "two":
        optimizers = [torch.optim.SGD(body.parameters(), lr=1e-2), torch.optim.AdamW(head.parameters(), lr=1e-3)]
    elif args.optimizer == "lookahead":
        optimizers = [Lookahead(torch.optim.SGD(params, lr=1e-2))]
    else:
        optimizers = [torch.optim.AdamW(params, lr=1e-3)]
    inner = [o.base if isinstance(o, Lookahead) else o for o in optimizers]
    hooked = [0] * len(inner)
    for i, o in enumerate(inner):
        o.register_step_post_hook(lambda *_, i=i: hooked.__setitem__(i, hooked[i] + 1))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizers[0], max_lr=1e-2, total_steps=args.steps) \
        if args.optimizer == "scheduler" else None
    if args.optimizer == "wrapper":
        optimizers = [Wrapper(optimizers[0])]
    if args.optimizer == "scaler":
        scaler = torch.amp.GradScaler("cpu")
    micro = 2 if args.optimizer == "accumulate" else 1
    calls = 0
    for step in range(args.steps * micro):
        x = torch.randn(4, 8, d)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=scaler is not None):
            loss = head(body(x)).float().square().mean()
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (step + 1) % micro:
            continue
        for o in optimizers:
            if scaler is not None:
                scaler.step(o)
                scaler.update()
            else:
                o.step()
        calls += 1
        if scheduler is not None:
            scheduler.step()
        if args.optimizer == "no-zero-grad":
            for q in params:
                q.grad = None
        else:
            for o in optimizers:
                o.zero_grad()
        print(f"step {calls - 1}: loss {loss.item():.4g}", flush=True)
    if args.oracle:
        assert max(hooked) == calls or scaler is not None, (hooked, calls)  # a GradScaler may skip a step
        print(f"oracle: optimizer steps: {max(hooked)}", flush=True)


if __name__ == "__main__":
    main()
