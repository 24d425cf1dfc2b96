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


# `python -m MODULE`: the launchers' modules by name. `-m` imports the module's package (and so
# torch) before argv[0] names the module's file: then only the interpreter's own command line,
# sys.orig_argv, says what runs.
_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torch.distributed.launch",
    "accelerate.commands.launch": "accelerate launch",
    "deepspeed.launcher.runner": "deepspeed",
    "deepspeed.launcher.launch": "deepspeed",
}
_OPTIONS_WITH_VALUE = ("-X", "-W", "--check-hash-based-pycs")


def main_module(orig_argv):
    """The module of `python [options] -m MODULE ...`, or None when the interpreter runs a script,
    a -c command or standard input."""
    words = list(orig_argv[1:])
    while words:
        word = words.pop(0)
        if word == "-m":
            return words[0] if words else None
        if word.startswith("-m") and not word.startswith("--"):
            return word[2:]
        if word in _OPTIONS_WITH_VALUE:
            words = words[1:]
        elif word == "-c" or word == "-" or not word.startswith("-"):
            return None
    return None


def launcher_name(argv=None, environ=None, orig_argv=None):
    """The launcher this process is ("torchrun"), or None for a process that may train."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    orig_argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if environ.get("RANK"):
        return None
    module = main_module(orig_argv)
    if module in _MODULES:
        return _MODULES[module]
    entry = (argv[0] if argv else "").replace("\\", "/")
    for suffix, command, name in _ENTRY_POINTS:
        named = entry and (entry == suffix.lstrip("/") or entry.endswith(suffix))
        if named and (command is None or command in argv[1:2]):
            return name
    return None
