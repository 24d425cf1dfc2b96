"""Fine-tuning a head on a frozen attention encoder (issue 61's headline phase): attention's forward
is checked every step, but no gradient flows back into the frozen encoder, so attention's backward
never runs and the first values nanprov's checks see go bad are gradients (the sentinel's). At
--fault-step one fault is planted in the head:
  forward   head.fc's weight becomes 3e38: its output overflows in the forward, from finite inputs,
            and the loss and every gradient of the step follow;
  backward  head.act's backward (a hand-written autograd.Function) turns the finite gradient it
            receives into Inf: the forward stays finite.
With --oracle, plain-PyTorch hooks (nothing of nanprov's) say where the values first went bad:
  oracle: first non-finite: step S phase fwd|bwd
(forward: some module's output held NaN/Inf; backward: the forward was finite, a gradient was not).
Each step prints its loss."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, HEADS, SEQ, BATCH = 32, 4, 8, 4


class ScaledGeluBackward(torch.autograd.Function):
    """GELU forward; the backward multiplies the gradient by `scale` (1e39 at the fault: float32 Inf)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return F.gelu(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            (g,) = torch.autograd.grad(F.gelu(x), x, grad)
        return g * ctx.scale, None


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj, self.ln = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM), nn.LayerNorm(DIM)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in self.qkv(self.ln(x)).split(C, dim=2))
        return x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, C))


class Act(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0

    def forward(self, x):
        return ScaledGeluBackward.apply(x, self.scale)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act, self.out = nn.Linear(DIM, 4 * DIM), Act(), nn.Linear(4 * DIM, 1)

    def forward(self, x):
        return self.out(self.act(self.fc(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.head = Encoder(), Head()

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fault", choices=["none", "forward", "backward"], default="none")
    p.add_argument("--fault-step", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Model()
    model.encoder.requires_grad_(False)  # frozen: only the head trains
    opt = torch.optim.SGD(model.head.parameters(), lr=1e-2)
    step, found = [0], []
    if args.oracle:
        for module in model.modules():
            def hook(mod, inputs, output):
                if not found and not bool(torch.isfinite(output).all()):
                    found.append(f"oracle: first non-finite: step {step[0]} phase fwd")
            module.register_forward_hook(hook)
    for s in range(args.steps):
        step[0] = s
        if s == args.fault_step and args.fault == "forward":
            with torch.no_grad():
                model.head.fc.weight.fill_(3e38)
        model.head.act.scale = 1e39 if s == args.fault_step and args.fault == "backward" else 1.0
        loss = model(torch.randn(BATCH, SEQ, DIM)).square().mean()
        opt.zero_grad()
        loss.backward()
        if args.oracle and not found and not all(bool(torch.isfinite(p.grad).all()) for p in model.head.parameters()):
            found.append(f"oracle: first non-finite: step {s} phase bwd")
        opt.step()
        print(f"step {s}: loss {loss.item()!r}", flush=True)
    if args.oracle:
        print(found[0] if found else "oracle: every value finite", flush=True)


if __name__ == "__main__":
    main()
