"""Two processes started the way Lightning's launcher starts them: the script's own process is
rank 0, and sets WORLD_SIZE, NODE_RANK and LOCAL_RANK in its environment only after torch was
imported, then starts rank 1 with LOCAL_RANK=1. Each trains a few steps of one SDPA layer (no
process group: what is checked is how each process records its rank and world)."""
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

if "LOCAL_RANK" not in os.environ:
    os.environ.update(WORLD_SIZE="2", NODE_RANK="0", LOCAL_RANK="0")
    child = subprocess.Popen([sys.executable, __file__], env={**os.environ, "LOCAL_RANK": "1"})
else:
    child = None
q = torch.randn(1, 2, 8, 4, requires_grad=True)
for _ in range(2):
    F.scaled_dot_product_attention(q, q, q).sum().backward()
print(f"local rank {os.environ['LOCAL_RANK']} of {os.environ['WORLD_SIZE']} trained", flush=True)
sys.exit(child.wait() if child else 0)
