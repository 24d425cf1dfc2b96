"""A stand-in for TransformerEngine's DotProductAttention, which cannot be installed here: a module
of that class name and call signature (query_layer, key_layer, value_layer, attention_mask=None,
...), called with keyword arguments as Megatron does. `--probe-module te` must find it through
the generic path. With --glitch-step the logits of the first layer overflow float32."""
import argparse
import math

import torch
import torch.nn as nn

from script_support import Stack, train


class DotProductAttention(nn.Module):
    def forward(self, query_layer, key_layer, value_layer, attention_mask=None, qkv_format="bhsd"):
        # Normalised by hand, not by torch's softmax: TE runs its own kernels, which nanprov's
        # default probes never see (a softmax would be checked as hand-written attention).
        scores = query_layer @ key_layer.transpose(-2, -1) / math.sqrt(query_layer.shape[-1])
        weights = (scores - scores.amax(-1, keepdim=True)).exp()
        return (weights / weights.sum(-1, keepdim=True)) @ value_layer


class Layer(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.qkv, self.core_attention = heads, nn.Linear(d, 3 * d), DotProductAttention()

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        o = self.core_attention(query_layer=q, key_layer=k, value_layer=v, qkv_format="bhsd")
        return x + o.transpose(1, 2).reshape(b, s, d)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--glitch-step", type=int, default=-1)
    args = p.parse_args()
    torch.manual_seed(0)
    train(Stack(Layer() for _ in range(2)), (2, 8, 32), steps=3, lr=1e-3, glitch_step=args.glitch_step)


if __name__ == "__main__":
    main()
