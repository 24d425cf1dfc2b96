"""Clean training with each kind of attention mask (issue 61): a mask's fills are not logits.

A small model with self-attention over a padded batch (a key padding mask) and cross-attention to
a "caption" whose encoder mask hides every key of a sample whose caption was dropped, as in
diffusers' guidance-dropout training (an all-zero encoder mask becomes a -10000 bias). The first
--clean-steps steps pad nothing and drop no caption, so a trend that read the fills as logits would
see them "grow" from the model's own logits to the fill at the first padded step.

--mask: neg1e4 (diffusers' -10000.0), neg1e9, finfo (finfo(dtype).min, Hugging Face's fill),
neginf (-inf), bool (True where a key is visible). The finite fills also drop captions (every key
of sample 0 hidden from step --clean-steps on); -inf and bool only pad (hiding every key with
them makes NaN, in any attention).
--dtype float32|float64: the model, its inputs and the mask.
--attn plain|sdpa: hand-written (q @ kᵀ / sqrt(d) + mask, softmax, @ v) or
F.scaled_dot_product_attention(attn_mask=...).
--oracle: plain-PyTorch forward hooks: the first module whose forward output went non-finite, or
"oracle: every forward output finite", and the largest score over visible keys in the run
("oracle: largest visible score X"): the largest logit the model really had."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, HEADS, SEQ, CAPTION, BATCH = 32, 4, 12, 6, 4
FINITE_FILLS = ("neg1e4", "neg1e9", "finfo")


def fill_of(kind, dtype):
    return {"neg1e4": -10000.0, "neg1e9": -1e9, "finfo": torch.finfo(dtype).min, "neginf": float("-inf")}[kind]


class Attention(nn.Module):
    def __init__(self, kind, attn, largest):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))
        self.kind, self.attn, self.largest = kind, attn, largest

    def mask(self, hidden, dtype):
        """hidden [B, K] (True: the key is hidden) as this kind of mask, broadcast over heads and queries."""
        hidden = hidden[:, None, None, :]
        if self.kind == "bool":
            return ~hidden
        return torch.zeros(hidden.shape, dtype=dtype).masked_fill(hidden, fill_of(self.kind, dtype))

    def forward(self, x, ctx, hidden):
        B, T, _ = x.shape
        K = ctx.shape[1]
        heads = lambda t, n: t.view(B, n, HEADS, DIM // HEADS).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x), T), heads(self.k(ctx), K), heads(self.v(ctx), K)
        mask = self.mask(hidden, q.dtype)
        if self.largest is not None:
            raw = (q @ k.transpose(-2, -1)).detach() / math.sqrt(DIM // HEADS)
            visible = (~hidden)[:, None, None, :].expand_as(raw)
            if visible.any():
                self.largest[0] = max(self.largest[0], float(raw[visible].max()))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(DIM // HEADS)
            scores = scores.masked_fill(~mask, float("-inf")) if self.kind == "bool" else scores + mask
            y = scores.softmax(dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, DIM))


class Model(nn.Module):
    def __init__(self, kind, attn, largest):
        super().__init__()
        self.embed, self.caption = nn.Linear(8, DIM), nn.Linear(8, DIM)
        self.ln_1, self.ln_2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.self_attn, self.cross_attn = Attention(kind, attn, largest), Attention(kind, attn, largest)
        self.head = nn.Linear(DIM, 1)

    def forward(self, x, caption, padded, dropped):
        h = self.embed(x)
        n = self.ln_1(h)
        h = h + self.self_attn(n, n, padded)
        h = h + self.cross_attn(self.ln_2(h), self.caption(caption), dropped)
        return self.head(h)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mask", choices=["neg1e4", "neg1e9", "finfo", "neginf", "bool"], required=True)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--attn", choices=["plain", "sdpa"], default="plain")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--clean-steps", type=int, default=3, help="the first steps pad nothing and drop no caption")
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    largest = [float("-inf")] if args.oracle else None
    model = Model(args.mask, args.attn, largest).to(dtype)
    step, nonfinite = [0], []
    if args.oracle:
        for name, module in model.named_modules():
            def hook(mod, inputs, output, name=name):
                if not nonfinite and not bool(torch.isfinite(output).all()):
                    nonfinite.append(f"{name or 'the model'} at step {step[0]}")
            module.register_forward_hook(hook)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for s in range(args.steps):
        step[0] = s
        x, caption = torch.randn(BATCH, SEQ, 8, dtype=dtype), torch.randn(BATCH, CAPTION, 8, dtype=dtype)
        padded = torch.zeros(BATCH, SEQ, dtype=torch.bool)
        dropped = torch.zeros(BATCH, CAPTION, dtype=torch.bool)
        if s >= args.clean_steps:
            padded[1::2, SEQ - 4:] = True  # every other sample is 4 tokens short
            if args.mask in FINITE_FILLS:
                dropped[0] = True  # sample 0's caption dropped: every caption key hidden
        loss = model(x, caption, padded, dropped).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {s}: loss {loss.item():.6g}", flush=True)
    if args.oracle:
        print(f"oracle: first non-finite forward output: {nonfinite[0]}" if nonfinite else
              "oracle: every forward output finite", flush=True)
        print(f"oracle: largest visible score {largest[0]!r}", flush=True)


if __name__ == "__main__":
    main()
