"""A Slurm task's training, as a user writes it: the rank and world size come from srun's task
environment (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) and are passed to init_process_group
explicitly, with a tcp:// rendezvous at MASTER_ADDR:MASTER_PORT. No RANK, WORLD_SIZE or LOCAL_RANK:
the probes learn each task's rank from its process group.

Usage: slurm_task_training.py EXAMPLE [EXAMPLE ARGS...] (EXAMPLE's --ddp calls init_process_group)."""
import os
import runpy
import sys

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])

import torch.distributed as dist  # noqa: E402

_init = dist.init_process_group


def _init_from_slurm(backend=None, **kwargs):
    kwargs.setdefault("init_method", f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
    return _init(backend, rank=rank, world_size=world, **kwargs)


dist.init_process_group = _init_from_slurm
example = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(example, run_name="__main__")
