"""Attention written in plain ops as third-party code writes it, trained (or run for inference) on
the CPU with a real fault in one step, for nanprov's default probes (no --probe-module):

  vit     timm's unfused path (Attention with fused_attn off): qkv, q * scale, q @ k.transpose(-2, -1),
          softmax, attn_drop, @ v. At --glitch-step a bad update has multiplied blocks.0's qkv weight
          by 1e20: the logits overflow float32 from finite q and k.
  unet    diffusers' AttnProcessor in a small conv UNet: head_to_batch_dim, baddbmm(mask, q, kᵀ,
          beta=1, alpha=scale), softmax upcast to float32, .to(dtype), bmm(P, v), batch_to_head_dim.
          At --glitch-step the feature map is large: in float32 (1e20) the scores overflow, in
          float16 (--dtype float16, 2000) baddbmm's float16 scores do (the SD-2 story).
  causal  a GPT-style block: q @ kᵀ / sqrt(d), masked_fill(causal | padding, -inf), softmax, @ v. At
          --glitch-step one sequence is left-padded, so its first query rows have every key masked:
          a plain softmax makes NaN there.

--oracle adds plain-PyTorch forward hooks on every module and prints the first module whose output
went non-finite from finite inputs, and the step. --no-grad runs forward passes under no_grad only
(inference). --device cuda trains on the GPU (batches drawn on the CPU, then moved). --print-losses
prints each step's loss (or output sum) as an exact hex float."""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# The ground truth the end-to-end tests compare nanprov with: the examples' plain-PyTorch oracle.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
from mha_padding import install_oracle  # noqa: E402


class TimmAttention(nn.Module):
    """timm.models.vision_transformer.Attention with fused_attn False."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = attn @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), TimmAttention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, dim=32, heads=4, depth=2, patch=4, image=16):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class DiffusersAttention(nn.Module):
    """diffusers.models.attention_processor.Attention run by AttnProcessor (upcast_softmax on)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])

    def head_to_batch_dim(self, t):
        b, n, d = t.shape
        return t.reshape(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3).reshape(b * self.heads, n, d // self.heads)

    def batch_to_head_dim(self, t):
        bh, n, d = t.shape
        return t.reshape(bh // self.heads, self.heads, n, d).permute(0, 2, 1, 3).reshape(bh // self.heads, n, d * self.heads)

    def get_attention_scores(self, query, key, attention_mask=None):
        dtype = query.dtype
        if attention_mask is None:
            baddbmm_input = torch.empty(query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype)
            beta = 0
        else:
            baddbmm_input, beta = attention_mask, 1
        attention_scores = torch.baddbmm(baddbmm_input, query, key.transpose(-1, -2), beta=beta, alpha=self.scale)
        attention_probs = attention_scores.float().softmax(dim=-1)
        return attention_probs.to(dtype)

    def forward(self, hidden_states, attention_mask=None):
        query = self.head_to_batch_dim(self.to_q(hidden_states))
        key = self.head_to_batch_dim(self.to_k(hidden_states))
        value = self.head_to_batch_dim(self.to_v(hidden_states))
        attention_probs = self.get_attention_scores(query, key, attention_mask)
        hidden_states = self.batch_to_head_dim(torch.bmm(attention_probs, value))
        return self.to_out[1](self.to_out[0](hidden_states))


class AttnBlock(nn.Module):
    def __init__(self, channels, heads):
        super().__init__()
        self.attn1 = DiffusersAttention(channels, heads)

    def forward(self, x, bias):
        b, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        return x + self.attn1(tokens, bias).transpose(1, 2).reshape(b, c, h, w)


class UNet(nn.Module):
    def __init__(self, channels=16, heads=2):
        super().__init__()
        self.conv_in = nn.Conv2d(3, channels, 3, padding=1)
        self.down = nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.mid_block = nn.ModuleList([AttnBlock(channels, heads), AttnBlock(channels, heads)])
        self.up = nn.ConvTranspose2d(channels, channels, 2, stride=2)
        self.conv_out = nn.Conv2d(channels, 3, 3, padding=1)
        self.heads = heads

    def forward(self, x):
        h = self.down(F.silu(self.conv_in(x)))
        # A relative-position bias as diffusers passes attention_mask: [batch·heads, tokens, tokens].
        n = h.shape[2] * h.shape[3]
        pos = torch.arange(n, dtype=torch.float32, device=h.device)
        bias = (-(pos[None, :] - pos[:, None]).abs() / n).to(h.dtype).expand(h.shape[0] * self.heads, n, n)
        for block in self.mid_block:
            h = block(h, bias)
        return self.conv_out(F.silu(self.up(h)))


class CausalAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, hidden):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(hidden, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(dim), CausalAttention(dim, heads)
        self.ln_2, self.mlp = nn.LayerNorm(dim), nn.Linear(dim, dim)

    def forward(self, x, hidden):
        x = x + self.attn(self.ln_1(x), hidden)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=50, dim=32, heads=4, depth=2, seq=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.h = nn.ModuleList(GPTBlock(dim, heads) for _ in range(depth))
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, tokens, padding):
        T = tokens.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).triu(1)
        hidden = causal[None, None] | padding[:, None, None, :]  # True: the key is hidden
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for block in self.h:
            x = block(x, hidden)
        return self.lm_head(x)


def batch(model_name, step, glitch_step, dtype, gen):
    """The step's inputs, with the fault at glitch_step."""
    if model_name == "causal":
        tokens = torch.randint(0, 50, (4, 12), generator=gen)
        padding = torch.zeros(4, 12, dtype=torch.bool)
        if step == glitch_step:
            padding[1, :3] = True  # left padding: query rows 0-2 of sequence 1 see no key
        return (tokens, padding)
    x = torch.randn(4, 3, 16, 16, generator=gen).to(dtype)
    if step == glitch_step and model_name == "unet":
        x[0] *= 2000 if dtype == torch.float16 else 1e20
    return (x,)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("vit", "unet", "causal"), required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--glitch-step", type=int, default=-1)
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-grad", action="store_true", help="forward passes under torch.no_grad only")
    p.add_argument("--oracle", action="store_true")
    p.add_argument("--print-losses", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = {"vit": ViT, "unet": UNet, "causal": GPT}[args.model]().to(args.device, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    steps = [0]
    if args.oracle:
        install_oracle(model, steps)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        steps[0] = step
        if step == args.glitch_step and args.model == "vit":
            with torch.no_grad():
                model.blocks[0].attn.qkv.weight.mul_(1e20)  # a bad update
        inputs = tuple(t.to(args.device) for t in batch(args.model, step, args.glitch_step, dtype, gen))
        if args.no_grad:
            with torch.no_grad():
                loss = model(*inputs).float().square().mean()
        else:
            loss = model(*inputs).float().square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        value = loss.item()
        print(f"step {step}: loss {value.hex() if args.print_losses else format(value, '.4g')}", flush=True)


if __name__ == "__main__":
    main()
