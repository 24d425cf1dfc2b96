"""Inference through a library's own attention op that is flaky, for nanprov's CPU tests of the
reruns (`nanprov run --probe-op 'flaky::attn:q=Q,k=K,v=V' --reruns N`): `flaky::attn(Tensor Q,
Tensor K, Tensor V) -> Tensor`, registered with torch.library when imported, computes attention in
plain PyTorch and, from its --flaky-from-th call on, writes a NaN into its output on every other
call, as a kernel with a race would on about half its runs. Its inputs are always finite, so its
first NaN is a source edge, and the run's reruns of that call must find it recurring in about half
of them. --oracle prints which of the op's calls wrote the NaN.
"""
import argparse
import itertools

import torch
import torch.nn as nn

from script_support import Stack

torch.library.define("flaky::attn", "(Tensor Q, Tensor K, Tensor V) -> Tensor")
_calls = itertools.count()
_flaky_from = [10**9]
_oracle = [False]


@torch.library.impl("flaky::attn", "CPU")
def _attn(Q, K, V):
    n = next(_calls)
    scores = (Q @ K.transpose(-2, -1)) / Q.shape[-1] ** 0.5
    out = scores.softmax(-1) @ V
    if n >= _flaky_from[0] and (n - _flaky_from[0]) % 2 == 0:
        out[0, 0, 0, 0] = float("nan")
        if _oracle[0]:
            print(f"oracle: flaky::attn call {n} wrote a NaN", flush=True)
    return out


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        o = torch.ops.flaky.attn(q, k, v)
        return x + self.out(torch.nan_to_num(o).transpose(1, 2).reshape(b, s, d))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=4)
    p.add_argument("--flaky-from", type=int, default=3, help="the op's call from which every other call writes a NaN")
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    _flaky_from[0] = args.flaky_from
    _oracle[0] = args.oracle
    torch.manual_seed(0)
    model = Stack(Layer(32, 2) for _ in range(2)).eval()
    with torch.no_grad():
        for i in range(args.passes):
            x = model(torch.randn(2, 8, 32))
            print(f"pass {i}: {x.sum().item():.6g}", flush=True)


if __name__ == "__main__":
    main()
