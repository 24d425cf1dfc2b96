"""Training whose attention module sits under an nn.ModuleDict key of 600 'ü' (1,200 bytes of
UTF-8): longer than the buffer the probes read module paths into, so the path is cut, and the cut
must not split a character. Tests run it with --capture-every 1, so every call's path also goes
into a capture header."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from script_support import train


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, 2, d // 2).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleDict({"ü" * 600: Attention(16)})

    def forward(self, x):
        for block in self.blocks.values():
            x = block(x)
        return x


def main():
    torch.manual_seed(0)
    train(Model(), (2, 8, 16), steps=2, lr=1e-2)


if __name__ == "__main__":
    main()
