"""Inference with a library's own attention op, for nanprov's CPU tests of `nanprov run --probe-op`:
a library that registers `mylib::attn(Tensor Q, Tensor K, Tensor V, Tensor(a!) O, int stages, int acc)
-> Tensor(a!)` with torch.library when imported (after torch), O an out buffer, with a CPU kernel in
plain PyTorch. A glitch in forward pass --glitch-pass makes layer 0's scores overflow float32 (finite
inputs, NaN output), as `nanprov run --probe-op 'mylib::attn:q=Q,k=K,v=V,o=O'` should find.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from script_support import Stack

torch.library.define("mylib::attn", "(Tensor Q, Tensor K, Tensor V, Tensor(a!) O, int stages, int acc) -> Tensor(a!)")


@torch.library.impl("mylib::attn", "CPU")
def _attn(Q, K, V, O, stages, acc):
    scores = (Q @ K.transpose(-2, -1)) / Q.shape[-1] ** 0.5
    O.copy_(scores.softmax(-1) @ V)
    return O


def attn_func(Q, K, V, O=None, stages=2, acc="f32"):
    return torch.ops.mylib.attn(Q, K, V, torch.zeros_like(Q) if O is None else O, stages, 1)


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.glitch = False

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        if self.glitch:
            q, k = q * 1e20, k * 1e20
        return x + self.out(attn_func(q, k, v).transpose(1, 2).reshape(b, s, d))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--glitch-pass", type=int, default=-1)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Stack(Layer(64, 4) for _ in range(2)).eval()
    with torch.no_grad():
        for i in range(args.passes):
            model.layers[0].glitch = i == args.glitch_pass
            x = model(torch.randn(2, 32, 64))
            print(f"pass {i}: {x.sum().item().hex()}", flush=True)


if __name__ == "__main__":
    main()
