"""Loads nanprov's C++ probes into a training process once torch is imported.

All logic lives in libnanprov_probes (C++). This module only: waits for `import torch`, checks
that the torch in this process is the one nanprov was built against, loads the library, and
feeds it what only Python knows: optimizer steps, and on request the current module path.
"""

import atexit
import json
import os
import sys

from . import (
    compiled_flex,
    compiled_graphs,
    compiled_trail,
    cuda_graphs,
    dataloader_workers,
    eager_flex,
    ffpa_probes,
    flash_attn_probes,
    launchers,
    module_paths,
    module_probes,
    op_probes,
    optimizer_steps,
    plain_softmax,
    probe_library,
    process_group,
    replicas,
    run_facts,
    trail,
)
from .import_watcher import ImportWatcher


def _say(message):
    sys.stderr.write(f"nanprov: {message}\n")


_group_rank = []  # the rank the process group gave, once it came up


def _report(status, detail=""):
    """One file per process, so `nanprov run` can say which processes were instrumented."""
    try:
        folder = os.path.join(os.environ["NANPROV_RUN_DIR"], "processes")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
            rank = _group_rank[0] if _group_rank else os.environ.get("RANK")
            json.dump(
                {
                    "pid": os.getpid(),
                    "rank": int(rank) if rank is not None and rank != "" else None,
                    "status": status,
                    "detail": detail,
                    "argv": sys.argv,
                },
                f,
            )
    except Exception:
        pass


_watcher = ImportWatcher()


def arm():
    launcher = launchers.launcher_name()
    if launcher:  # it would claim rank 0's store (launchers.py)
        _report("launcher", f"{launcher} starts the workers and trains nothing: not instrumented")
        return
    _watcher.watch("torch", _load)


def _abi_of(torch):
    return str(int(torch._C._GLIBCXX_USE_CXX11_ABI))


def _load(torch):
    try:
        built, built_abi = os.environ["NANPROV_BUILT_TORCH"], os.environ["NANPROV_BUILT_ABI"]
        have, have_abi = torch.__version__, _abi_of(torch)
        if (have, have_abi) != (built, built_abi):
            rebuild = os.environ.get("NANPROV_REBUILD", "")
            message = (
                f"torch {have} (C++11 ABI {have_abi}) in this process, but nanprov was built "
                f"against torch {built} (ABI {built_abi}); training continues uninstrumented. "
                f"Rebuild it for this torch: {rebuild or 'see nanprov doctor'}"
            )
            _say(message)
            _report("torch-mismatch", message)
            return
        lib = probe_library.load(os.environ["NANPROV_PROBES_LIB"])
        _guarded("the versions of the attention stack", lambda: run_facts.hand_over(lib, torch))
        if lib.nanprov_start() != 0:
            message = lib.nanprov_last_error().decode(errors="replace")
            _say(f"probes not started, training continues uninstrumented: {message}")
            _report("probe-error", message)
            return
        _guarded("DataLoader workers", lambda: dataloader_workers.install(torch, lib))
        before_step = _learn_rank(torch, lib)
        _guarded("CUDA graphs", lambda: cuda_graphs.install(torch, lib))
        _watcher.watch(
            "torch._inductor.cudagraph_trees",
            lambda m: _guarded("cudagraph trees", lambda: cuda_graphs.watch_cudagraph_trees(m, lib)),
        )
        modules = module_paths.ModulePaths(torch)
        # NANPROV_REPLICA_DIGESTS=0: no digests (what bench/gpu_overhead.sh's `nodigest` measures).
        replicated = None
        if os.environ.get("NANPROV_REPLICA_DIGESTS", "1") != "0":
            replicated = replicas.Replicas(torch)
            _guarded("replica digests", replicated.install)
        optimizer_steps.watch(lib, torch, modules, _say, before_step, replicated)
        resolver = module_paths.install_resolver(lib, modules)
        if os.environ.get("NANPROV_COMPILED_PATHS", "1") != "0":
            _watcher.watch("torch._dynamo.output_graph", lambda m: compiled_graphs.watch(lib, torch, m, modules))
        eager_flex.install(torch, _say)
        _watcher.watch("torch._inductor.config", lambda config: _inductor_passes(torch, config))
        count_unprobed = lambda what: lib.nanprov_count_unprobed(what.encode(), 1)  # noqa: E731
        flash_attn_probes.watch(_watcher, torch, _say, count_unprobed)
        ffpa_probes.watch(_watcher, torch, _say, count_unprobed)
        _guarded("nn.MultiheadAttention", lambda: plain_softmax.install_mha(torch, _say, count_unprobed))
        _watcher.watch(
            "transformers.modeling_utils",
            lambda m: _guarded("Hugging Face eager attention", lambda: plain_softmax.install_hf_eager(torch, _say, m)),
        )
        unmatched = module_probes.install(torch, modules, _say)
        _guarded("--trail", lambda: trail.install(torch, lib, modules, _say))
        ops_unmatched = op_probes.install(torch, lib, _say)
        # Shutdown drops the resolver before the interpreter (and the callback) goes away.
        atexit.register(
            lambda: (unmatched and unmatched(), ops_unmatched and ops_unmatched(), lib.nanprov_shutdown(), resolver)
        )
        _close_store_before_os_exit(lib)
        _report("instrumented")
    except Exception as exc:
        _say(f"probes not loaded, training continues uninstrumented: {exc}")
        _report("probe-error", str(exc))


def _learn_rank(torch, lib):
    """The check the optimizer runs before each step until the process group is known."""
    failed = []

    def fail(exc):
        if not failed:
            failed.append(exc)
            _say(
                f"the process group's rank is not read ({type(exc).__name__}: {exc}); "
                "the environment's names this process"
            )

    def on_rank(rank):
        _group_rank[:] = [rank]
        _report("instrumented")

    try:
        return process_group.install(torch, lib, on_rank, fail)
    except Exception as exc:
        fail(exc)
        return lambda: None


def _close_store_before_os_exit(lib):
    """os._exit runs no atexit hook, and DataLoader workers, crash handlers and launchers end
    processes with it: the store is closed first, so the calls queued for it are kept. (In a
    forked child the shutdown does nothing: the parent owns the store.)"""
    original = os._exit

    def _exit(status):
        try:
            lib.nanprov_shutdown()
        except BaseException:  # never in the way of the exit asked for
            pass
        original(status)

    _exit.__wrapped__ = original
    _exit.__doc__ = original.__doc__
    os._exit = _exit


def _inductor_passes(torch, config):
    """Inductor's post-grad passes: compiled FlexAttention's brackets, then, with --trail, the
    checks of the modules' backward in compiled code (each chains the one set before it)."""
    compiled_flex.install(torch, config, _say)
    if trail.enabled():
        _guarded("--trail in compiled backward graphs", lambda: compiled_trail.install_backward_checks(config))


def _guarded(what, install):
    try:
        install()
    except Exception as exc:  # never reaches the training
        _say(f"{what} is not probed ({type(exc).__name__}: {exc}); training continues")
