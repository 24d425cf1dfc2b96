"""Runs a training script after a stray process took one rank's store name: on rank R (the first
argument) an empty, read-only rank-R.sqlite appears in the run directory before torch is imported,
so that rank's worker cannot create its store. The rest of the arguments are the script and its own.
"""
import os
import runpy
import sys

taken = int(sys.argv.pop(1))
if int(os.environ.get("RANK", "0")) == taken:
    path = os.path.join(os.environ["NANPROV_RUN_DIR"], f"rank-{taken}.sqlite")
    open(path, "w").close()
    os.chmod(path, 0o444)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
