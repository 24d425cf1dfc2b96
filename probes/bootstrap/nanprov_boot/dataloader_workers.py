"""DataLoader worker processes belong to their training process.

A worker started with `spawn` imports torch and loads the probes like any process of the run; one
started with `fork` inherits them. Either way it must not take its rank's store, which belongs to
the process that trains (a spawned worker that ran attention first took it, and the training was
then recorded nowhere: a false clean), and its attention must not go unseen. So the worker loop
says, before it starts, that this process is a worker: the probes then check nothing here and
count each attention call for the rank (Session::becomeWorker), and the report names them.

The loop is replaced where DataLoader looks it up when it starts a worker
(`_utils.worker._worker_loop`, read at that moment), under its own name, so a spawned worker
unpickles this wrapper as it would the original.
"""

import functools


def install(torch, lib):
    worker = torch.utils.data._utils.worker
    original = worker._worker_loop
    if getattr(original, "__nanprov_worker__", False):
        return

    @functools.wraps(original)
    def _worker_loop(*args, **kwargs):
        try:
            lib.nanprov_become_worker()
        except Exception:  # never in the way of the worker
            pass
        return original(*args, **kwargs)

    _worker_loop.__nanprov_worker__ = True
    worker._worker_loop = _worker_loop
