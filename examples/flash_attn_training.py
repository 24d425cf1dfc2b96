"""Training whose attention is FlashAttention (--flavour fa4: `flash_attn.cute`, the default; fa2:
`flash_attn`; fa3: `flash_attn_interface`), in its (B, S, H, D) layout or, with --varlen, on packed
sequences of different lengths (cu_seqlens), as FlashAttention runs them.

With --overflow-layer L --overflow-step N, layer L skips its query/key normalisation at step N:
its scores then overflow float32 inside FA4's kernel (finite Q and K, non-finite O), and the loss
goes NaN. nanprov finds that call when the bootstrap has wrapped FlashAttention's autograd functions.

FlashAttention runs on NVIDIA GPUs (FA3 on Hopper, FA4 on Hopper and Blackwell). Elsewhere put
stand-in packages with their call signatures on PYTHONPATH (tests/e2e/scripts/flash_attn_standin
does this for nanprov's CPU tests).
"""
import argparse
import importlib

import torch
import torch.nn as nn

FLAVOURS = {"fa2": "flash_attn", "fa3": "flash_attn_interface", "fa4": "flash_attn.cute"}
flash_attn_func = flash_attn_varlen_func = None


class Block(nn.Module):
    def __init__(self, d_model, heads, varlen):
        super().__init__()
        self.heads, self.varlen = heads, varlen
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.skip_qk_norm = False

    def forward(self, x, cu_seqlens, max_seqlen):
        # x: (B, S, d_model), or (total, d_model) packed.
        shape = x.shape[:-1]
        q, k, v = (t.unflatten(-1, (self.heads, -1)) for t in self.qkv(x).chunk(3, -1))
        if self.skip_qk_norm:  # the glitch: unnormalised q and k, whose scores overflow float32
            q, k = q * 1e20, k * 1e20
        else:
            q, k = nn.functional.normalize(q, dim=-1) * 4, nn.functional.normalize(k, dim=-1) * 4
        if self.varlen:
            o = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens,
                                       max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen, causal=True)
        else:
            o = flash_attn_func(q, k, v, causal=True)
        o = o[0] if isinstance(o, tuple) else o
        return self.norm(x + self.out(o.reshape(*shape, -1)))


class Model(nn.Module):
    def __init__(self, vocab, d_model, heads, layers, varlen):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList(Block(d_model, heads, varlen) for _ in range(layers))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens, cu_seqlens=None, max_seqlen=None):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h, cu_seqlens, max_seqlen)
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--flavour", choices=sorted(FLAVOURS), default="fa4", help="which FlashAttention (default fa4)")
    p.add_argument("--varlen", action="store_true", help="packed sequences of different lengths (flash_attn_varlen_func)")
    p.add_argument("--overflow-layer", type=int, default=-1)
    p.add_argument("--overflow-step", type=int, default=-1)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--print-losses", action="store_true", help="print each loss as an exact hex float")
    args = p.parse_args()
    global flash_attn_func, flash_attn_varlen_func
    package = importlib.import_module(FLAVOURS[args.flavour])
    flash_attn_func, flash_attn_varlen_func = package.flash_attn_func, package.flash_attn_varlen_func
    torch.manual_seed(0)
    heads, vocab = 4, 256
    dtype = getattr(torch, args.dtype)
    model = Model(vocab, heads * args.head_dim, heads, args.layers, args.varlen).to(args.device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lengths = [args.seq, args.seq // 2 + 8, args.seq // 4]  # three sequences, packed with --varlen
    for step in range(args.steps):
        for i, layer in enumerate(model.layers):
            layer.skip_qk_norm = step == args.overflow_step and i == args.overflow_layer
        if args.varlen:
            tokens = torch.randint(0, vocab, (sum(lengths),), device=args.device)
            cu = torch.tensor([0] + [sum(lengths[:i + 1]) for i in range(len(lengths))], device=args.device,
                              dtype=torch.int32)
            logits = model(tokens, cu, max(lengths))
        else:
            tokens = torch.randint(0, vocab, (2, args.seq), device=args.device)
            logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, -2), tokens.flatten().roll(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.float().item().hex() if args.print_losses else f'{loss.item():.4f}'}")


if __name__ == "__main__":
    main()
