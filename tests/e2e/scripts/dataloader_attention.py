"""A training whose DataLoader workers run attention too: each sample's features are pooled by
SDPA in the dataset's __getitem__ (in the worker process), and the model trains one SDPA layer
in the training process. Prints the ground truth the test compares with, counted by plain
PyTorch: the training's attention calls (a forward hook, forward and backward), the workers'
(one per sample), and the training process's pid.

    dataloader_attention.py --context spawn|fork [--workers 2] [--steps 4] [--glitch-step S]
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class PooledFeatures(torch.utils.data.Dataset):
    """Samples whose features a tiny attention pools, as feature extractors in data pipelines do."""

    def __init__(self, n, glitch):
        self.n, self.glitch = n, glitch

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        tokens = torch.randn(1, 1, 6, 8, generator=g)
        pooled = F.scaled_dot_product_attention(tokens, tokens, tokens)  # attention in the worker
        x = pooled.reshape(6, 8)
        if i in self.glitch:
            x = x * 1e20  # overflows the training attention's float32 logits
        return x


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        return F.scaled_dot_product_attention(q, k, v).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--context", choices=["spawn", "fork"], required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--glitch-step", type=int, default=-1)
    a = p.parse_args()
    torch.manual_seed(0)
    glitch = set(range(a.glitch_step * a.batch, a.glitch_step * a.batch + 1)) if a.glitch_step >= 0 else set()
    data = PooledFeatures(a.steps * a.batch, glitch)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, num_workers=a.workers,
                                         multiprocessing_context=a.context)
    model = Attention(8)
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step, x in enumerate(loader):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4g}", flush=True)
    print(f"training attention calls: {2 * calls[0]}")  # forward and backward
    print(f"worker attention calls: {len(data)}")
    print(f"training pid: {os.getpid()}")


if __name__ == "__main__":
    main()
