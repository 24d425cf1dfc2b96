"""The bootstrap's launcher test (probes/bootstrap/nanprov_boot/launchers.py) against the command
lines the launchers really run with: a launcher loads no probes, a worker and a plain script do.

Usage: launchers_test.py BOOTSTRAP_DIR
"""
import importlib.util
import os
import sys


def load(bootstrap):
    # The module alone: the package's __init__ imports its siblings, which this test does not need.
    path = os.path.join(bootstrap, "nanprov_boot", "launchers.py")
    spec = importlib.util.spec_from_file_location("launchers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    launchers = load(sys.argv[1])
    name = launchers.launcher_name
    venv = "/venv/bin"
    site = "/venv/lib/python3.11/site-packages"
    cases = [
        ([f"{venv}/torchrun", "--nproc-per-node=2", "train.py"], {}, "torchrun"),
        ([f"{site}/torch/distributed/run.py", "--nnodes=2", "train.py"], {}, "torchrun"),
        ([f"{site}/torch/distributed/launch.py", "train.py"], {}, "torch.distributed.launch"),
        ([f"{venv}/accelerate", "launch", "train.py"], {}, "accelerate launch"),
        ([f"{venv}/accelerate", "config"], {}, None),
        ([f"{venv}/lightning", "run", "model", "train.py"], {}, "lightning run"),
        ([f"{venv}/deepspeed", "train.py"], {}, "deepspeed"),
        # A worker (RANK set) is never a launcher, whatever it runs.
        ([f"{venv}/torchrun", "train.py"], {"RANK": "1"}, None),
        # A plain script, and one merely named like a launcher's folder.
        (["train.py"], {}, None),
        (["/home/me/torchrun_experiments/train.py"], {}, None),
        ([], {}, None),
    ]
    # `python -m MODULE`: torch is imported while argv[0] is still "-m"; the interpreter's command
    # line says which module runs.
    modules = [
        (["python", "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py"], "torchrun"),
        (["python", "-u", "-X", "dev", "-m", "torch.distributed.launch", "train.py"], "torch.distributed.launch"),
        (["python", "-maccelerate.commands.launch", "train.py"], "accelerate launch"),
        (["python", "-m", "my_trainer", "--nproc-per-node=2"], None),
        (["python", "train.py", "-m", "torch.distributed.run"], None),
        (["python", "-c", "import torch"], None),
    ]
    cases = [(argv, environ, want, ["python", "train.py"]) for argv, environ, want in cases]
    cases += [(["-m"], {}, want, orig) for orig, want in modules]
    cases.append((["-m"], {"RANK": "0"}, None, ["python", "-m", "torch.distributed.run", "train.py"]))
    failed = 0
    for argv, environ, want, orig in cases:
        got = name(argv, environ, orig)
        if got != want:
            failed += 1
            print(f"FAIL: {argv} {environ} {orig}: {got!r}, want {want!r}")
    print(f"{len(cases) - failed}/{len(cases)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
