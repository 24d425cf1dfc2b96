"""Runs a training script and SIGKILLs its own process a given number of seconds after torch was
imported: `killed_at_random.py SECONDS SCRIPT ARGS...` (the kill drills pick SECONDS at random).
No exit hook runs: what the store holds is what its writer had committed at that moment."""
import os
import runpy
import signal
import sys
import threading

import torch  # noqa: F401  imported before the clock starts: its import time varies more than training does

after, script = float(sys.argv[1]), sys.argv[2]
sys.argv = [script] + sys.argv[3:]
killer = threading.Timer(after, lambda: os.kill(os.getpid(), signal.SIGKILL))
killer.daemon = True  # a training that ends first exits as usual
killer.start()
runpy.run_path(script, run_name="__main__")
