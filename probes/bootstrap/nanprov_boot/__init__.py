"""Loads nanprov's C++ probes into a training process once torch is imported.

All logic lives in libnanprov_probes (C++). This module only: waits for `import torch`, checks
that the torch in this process is the one nanprov was built against, loads the library, and
feeds it what only Python knows: optimizer steps, and on request the current module path.
"""
import atexit
import ctypes
import importlib.util
import json
import os
import sys
import threading
import weakref


# int resolve(char* buffer, size_t capacity): writes the current module path, returns its length.
_Resolver = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)


def _say(message):
    sys.stderr.write(f"nanprov: {message}\n")


def _report(status, detail=""):
    """One file per process, so `nanprov run` can say which processes were instrumented."""
    try:
        folder = os.path.join(os.environ["NANPROV_RUN_DIR"], "processes")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
            json.dump({"pid": os.getpid(), "rank": int(os.environ.get("RANK", "0") or 0),
                       "status": status, "detail": detail, "argv": sys.argv}, f)
    except Exception:
        pass


class _TorchImportWatcher:
    """A meta-path finder that runs _load() right after `torch` finished importing."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_load(module):
            exec_module(module)
            _load(module)

        spec.loader.exec_module = exec_then_load
        return spec


def arm():
    if "torch" in sys.modules:
        _load(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchImportWatcher())


def _abi_of(torch):
    return str(int(torch._C._GLIBCXX_USE_CXX11_ABI))


def _load(torch):
    try:
        built, built_abi = os.environ["NANPROV_BUILT_TORCH"], os.environ["NANPROV_BUILT_ABI"]
        have, have_abi = torch.__version__, _abi_of(torch)
        if (have, have_abi) != (built, built_abi):
            message = (f"torch {have} (C++11 ABI {have_abi}) in this process, but nanprov was built "
                       f"against torch {built} (ABI {built_abi}); training continues uninstrumented. "
                       f"Rebuild nanprov with this Python (./scripts/test) or use the one it was built "
                       f"for (source scripts/activate)")
            _say(message)
            _report("torch-mismatch", message)
            return
        lib = ctypes.CDLL(os.environ["NANPROV_PROBES_LIB"])
        lib.nanprov_last_error.restype = ctypes.c_char_p
        lib.nanprov_step.argtypes = [ctypes.c_longlong]
        lib.nanprov_set_module_resolver.argtypes = [_Resolver]
        if lib.nanprov_start() != 0:
            message = lib.nanprov_last_error().decode(errors="replace")
            _say(f"probes not started, training continues uninstrumented: {message}")
            _report("probe-error", message)
            return
        _watch_steps(lib)
        resolver = _watch_modules(lib, torch)
        # Shutdown drops the resolver before the interpreter (and the callback) goes away.
        atexit.register(lambda: (lib.nanprov_shutdown(), resolver))
        _report("instrumented")
    except Exception as exc:
        _say(f"probes not loaded, training continues uninstrumented: {exc}")
        _report("probe-error", str(exc))


def _watch_steps(lib):
    """Step = the most steps any one optimizer has taken, so two optimizers do not count twice."""
    taken = weakref.WeakKeyDictionary()
    high = [0]

    def after_step(optimizer, args, kwargs):
        n = taken.get(optimizer, 0) + 1
        taken[optimizer] = n
        if n > high[0]:
            high[0] = n
            lib.nanprov_step(n)

    importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(after_step)


def _watch_modules(lib, torch):
    """Tells the probes which module runs an attention call ("model.layers.3.self_attn").

    Asked, not pushed: the probes call back on each forward attention call, and the path is
    found by walking this thread's Python stack to the innermost frame whose `self` is a module.
    Global module hooks would tax every module call of the model instead.
    """
    module_type = torch.nn.Module
    paths = weakref.WeakKeyDictionary()  # outermost module -> WeakKeyDictionary(module -> path)

    def path_of(inner, root):
        table = paths.get(root)
        if table is None or inner not in table:  # first call, or modules were added since
            table = weakref.WeakKeyDictionary((m, name.encode()) for name, m in root.named_modules())
            paths[root] = table
        return table.get(inner, b"")

    def resolve(buffer, capacity):
        try:
            inner = root = None
            frame = sys._getframe(1)
            while frame is not None:
                code = frame.f_code
                if code.co_argcount and code.co_varnames[0] == "self":
                    obj = frame.f_locals.get("self")
                    if isinstance(obj, module_type):
                        inner = inner or obj
                        root = obj
                frame = frame.f_back
            if inner is None:
                return 0
            path = path_of(inner, root)[: capacity - 1]
            ctypes.memmove(buffer, path, len(path))
            return len(path)
        except Exception:
            return 0  # never let a lookup failure reach the training

    callback = _Resolver(resolve)
    lib.nanprov_set_module_resolver(callback)
    return callback  # kept alive by the caller: the probes hold only its address
