"""Which process of a run is a launcher: it starts the workers and trains nothing itself.

torchrun's elastic agent, accelerate's, Lightning's and DeepSpeed's launchers import torch like
any worker, but have no RANK in their environment: loaded there, the probes would take rank 0's
store name (rank-0.sqlite) and the real rank 0 would train unrecorded. A launcher therefore loads
no probes. A process is a launcher only by what it runs (its entry point, below) and only
without RANK: a plain `python train.py` has neither and records as rank 0.
"""
import os
import sys

# (how the entry point's path ends, the sub-command it must be given or None, the launcher's name).
# Console scripts end in their name; `python -m pkg.mod` runs with argv[0] the module's file.
_ENTRY_POINTS = (
    ("/torchrun", None, "torchrun"),
    ("torch/distributed/run.py", None, "torchrun"),
    ("torch/distributed/launch.py", None, "torch.distributed.launch"),
    ("/accelerate", "launch", "accelerate launch"),
    ("accelerate/commands/launch.py", None, "accelerate launch"),
    ("/lightning", "run", "lightning run"),
    ("/fabric", "run", "fabric run"),
    ("/deepspeed", None, "deepspeed"),
    ("deepspeed/launcher/runner.py", None, "deepspeed"),
    ("deepspeed/launcher/launch.py", None, "deepspeed"),
)


def launcher_name(argv=None, environ=None):
    """The launcher this process is ("torchrun"), or None for a process that may train."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    if environ.get("RANK") or not argv:
        return None
    entry = (argv[0] or "").replace("\\", "/")
    for suffix, command, name in _ENTRY_POINTS:
        if (entry == suffix.lstrip("/") or entry.endswith(suffix)) and (command is None or command in argv[1:2]):
            return name
    return None
