"""Starts N ranks of a training script the ways launchers that set no RANK do, each rank told its
rank another way, as a new user's job would be:
  launch_ranks.py spawn N SCRIPT ARGS...       torch.multiprocessing.spawn (the DDP tutorial's
                                               pattern): each process runs SCRIPT with --rank i
  launch_ranks.py subprocess N SCRIPT ARGS...  a hand-written launcher: N children, --rank i each
  launch_ranks.py slurm N SCRIPT ARGS...       as srun starts tasks: N children with Slurm's task
                                               variables only (SLURM_PROCID...); SCRIPT reads them
  launch_ranks.py MODE N --unrecorded R SCRIPT... rank R starts with no NANPROV_* variable, as from a
                                               launcher that passes no environment (srun --export=NONE)
Every rank gets --ddp --dist-init file://RENDEZVOUS, a fresh file (a TCP port picked here could be
taken by a concurrent test before rank 0 binds it), and --world-size N where the rank is passed.
Exits with the first failing rank's status.
"""
import os
import runpy
import subprocess
import sys
import tempfile

# Whatever launched the test must not tell the ranks who they are.
_LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                       "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def run_rank(index, script, args):
    """One spawned rank: the script in this process, as mp.spawn's function would run it."""
    sys.argv = [script] + args + ["--rank", str(index)]
    runpy.run_path(script, run_name="__main__")


def main():
    mode, n, rest = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    unrecorded = -1
    if rest[0] == "--unrecorded":
        unrecorded, rest = int(rest[1]), rest[2:]
    script, args = rest[0], rest[1:]
    for name in _LAUNCHER_VARIABLES:
        os.environ.pop(name, None)
    rendezvous = os.path.join(tempfile.mkdtemp(prefix="nanprov-rendezvous-"), "store")
    args = args + ["--ddp", "--dist-init", f"file://{rendezvous}"]
    if mode == "spawn":
        import torch.multiprocessing as mp

        mp.spawn(run_rank, args=(script, args + ["--world-size", str(n)]), nprocs=n)
        return 0
    children = []
    for i in range(n):
        env = dict(os.environ)
        rank_args = ["--rank", str(i), "--world-size", str(n)]
        if mode == "slurm":
            env.update(SLURM_PROCID=str(i), SLURM_LOCALID=str(i), SLURM_NTASKS=str(n), SLURM_NODEID="0",
                       SLURM_JOB_ID="4242", SLURM_STEP_ID="0")
            rank_args = []
        if i == unrecorded:
            env = {k: v for k, v in env.items() if not k.startswith("NANPROV_")}
        children.append(subprocess.Popen([sys.executable, script] + args + rank_args, env=env))
    codes = [c.wait() for c in children]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
