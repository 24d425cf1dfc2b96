"""Seed 001's shape in small: a Gemma4-like decoder whose full-attention layers (head_dim 512, GQA) run
FFPA (`ffpa_attn.ffpa_attn_func`, Triton kernels) and whose sliding-window layers (head_dim 256) run
FlexAttention with a sliding-window block mask (--sliding flex; compiled with --compile, as NeMo's
Gemma4 recipe does), or `ffpa_attn_func` with a sliding-window bool mask, which FFPA hands straight to
SDPA at head_dim 256 (--sliding sdpa; the CPU tests, where FlexAttention has no backward).

Layers alternate sliding (even) and full (odd). With --overflow-layer L --overflow-step N, layer L skips
its query/key normalisation at step N: its scores overflow the kernel's float32 accumulator (finite bf16
Q and K, non-finite O) and the loss goes NaN. nanprov finds that call: step N, layer L, backend ffpa.

FFPA runs on NVIDIA GPUs; elsewhere put a stand-in package of its layout on PYTHONPATH
(tests/e2e/scripts/ffpa_standin does this for nanprov's CPU tests). FFPA runs its own kernels only from
head_dim 257 and 512 tokens on (shorter sequences go to SDPA): keep --seq at 512 or more.
"""
import argparse

import torch
import torch.nn as nn
from ffpa_attn import ffpa_attn_func


class Attention(nn.Module):
    def __init__(self, d_model, heads, kv_heads, head_dim, sliding, args):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.sliding = heads, kv_heads, head_dim, sliding
        self.window, self.flex = args.window, sliding and args.sliding == "flex"
        self.q_proj = nn.Linear(d_model, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, d_model, bias=False)
        self.skip_qk_norm = False

    def forward(self, x, block_mask, window_mask):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)  # a transposed view, as in HF
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.skip_qk_norm:  # the glitch: unnormalised q and k, whose scores overflow float32
            q, k = q * 1e20, k * 1e20
        else:  # Gemma4 normalises q and k per head
            q, k = nn.functional.normalize(q, dim=-1) * 4, nn.functional.normalize(k, dim=-1) * 4
        if self.flex:
            from torch.nn.attention.flex_attention import flex_attention
            o = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=self.heads != self.kv_heads)
        elif self.sliding:
            o = ffpa_attn_func(q, k, v, attn_mask=window_mask, enable_gqa=self.heads != self.kv_heads)
        else:
            o = ffpa_attn_func(q, k, v, is_causal=True, enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))


class DecoderLayer(nn.Module):
    def __init__(self, i, args):
        super().__init__()
        sliding = i % 2 == 0
        self.input_layernorm = nn.RMSNorm(args.d_model)
        self.self_attn = Attention(args.d_model, args.heads, args.kv_heads, 256 if sliding else 512, sliding, args)
        self.post_attention_layernorm = nn.RMSNorm(args.d_model)
        self.mlp = nn.Sequential(nn.Linear(args.d_model, 2 * args.d_model), nn.GELU(), nn.Linear(2 * args.d_model, args.d_model))

    def forward(self, x, block_mask, window_mask):
        x = x + self.self_attn(self.input_layernorm(x), block_mask, window_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, args, vocab):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, args.d_model)
        self.layers = nn.ModuleList(DecoderLayer(i, args) for i in range(args.layers))
        self.norm = nn.RMSNorm(args.d_model)
        self.lm_head = nn.Linear(args.d_model, vocab, bias=False)

    def forward(self, tokens, block_mask, window_mask):
        h = self.embed_tokens(tokens)
        for layer in self.layers:
            h = layer(h, block_mask, window_mask)
        return self.lm_head(self.norm(h))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=4, help="even: sliding window, head_dim 256; odd: full, head_dim 512")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=1)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--sliding", choices=["flex", "sdpa"], default="flex" if torch.cuda.is_available() else "sdpa")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (FFPA's calls stay eager: it "
                   "disables Dynamo around its autograd function)")
    p.add_argument("--overflow-layer", type=int, default=-1)
    p.add_argument("--overflow-step", type=int, default=-1)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", help="FFPA takes fp16 and bf16 only")
    p.add_argument("--print-losses", action="store_true", help="print each loss as an exact hex float")
    args = p.parse_args()
    torch.manual_seed(0)
    vocab = 256
    model = Model(args, vocab).to(args.device, getattr(torch, args.dtype))
    run = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    window = lambda b, h, q, kv: (q >= kv) & (q - kv < args.window)  # noqa: E731
    block_mask = None
    if args.sliding == "flex":
        from torch.nn.attention.flex_attention import create_block_mask
        block_mask = create_block_mask(window, None, None, args.seq, args.seq, device=args.device)
    i = torch.arange(args.seq, device=args.device)
    window_mask = window(None, None, i[:, None], i[None, :])
    for step in range(args.steps):
        for n, layer in enumerate(model.layers):
            layer.self_attn.skip_qk_norm = step == args.overflow_step and n == args.overflow_layer
        tokens = torch.randint(0, vocab, (args.batch, args.seq), device=args.device)
        logits = run(tokens, block_mask, window_mask)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, -2), tokens.flatten().roll(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.float().item().hex() if args.print_losses else f'{loss.item():.4f}'}", flush=True)


if __name__ == "__main__":
    main()
