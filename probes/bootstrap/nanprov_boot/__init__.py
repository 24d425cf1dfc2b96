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
import re
import sys
import threading
import weakref

from . import compiled_flex, eager_flex, flash_attn_probes, module_probes, op_probes, plain_softmax


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


class _ImportWatcher:
    """A meta-path finder that runs a callback right after a module finished importing.

    Used for `torch` (to load the probes) and for torch modules nanprov hooks only when the
    training uses them (Dynamo), so a plain run never imports them.
    """

    def __init__(self):
        self.callbacks = {}
        self.finding = set()  # names whose real spec is being looked up (without us)

    def watch(self, name, callback):
        if name in sys.modules:
            callback(sys.modules[name])
            return
        self.callbacks[name] = callback
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(self, name, path=None, target=None):
        # A spec asked for is not a module imported: importlib.util.find_spec (how Hugging Face
        # asks whether flash_attn_interface is installed) lands here too, so the callback stays
        # until the module's code has actually run.
        if name not in self.callbacks or name in self.finding:
            return None
        self.finding.add(name)
        try:
            spec = importlib.util.find_spec(name)  # the real spec, from the finders after us
        finally:
            self.finding.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_callback(module):
            exec_module(module)
            callback = self.callbacks.pop(name, None)
            if not self.callbacks and self in sys.meta_path:
                sys.meta_path.remove(self)
            if callback is not None:
                callback(module)

        spec.loader.exec_module = exec_then_callback
        return spec


_watcher = _ImportWatcher()


def arm():
    _watcher.watch("torch", _load)


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
        lib.nanprov_count_unprobed.argtypes = [ctypes.c_char_p, ctypes.c_longlong]
        lib.nanprov_compiled_grad_mode.argtypes = [ctypes.c_int]
        lib.nanprov_foreign_calls.restype = ctypes.c_longlong
        lib.nanprov_probe_op.restype = ctypes.c_char_p
        lib.nanprov_probe_op.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
        if lib.nanprov_start() != 0:
            message = lib.nanprov_last_error().decode(errors="replace")
            _say(f"probes not started, training continues uninstrumented: {message}")
            _report("probe-error", message)
            return
        modules = _ModulePaths(torch)
        _watch_steps(lib, torch, modules)
        resolver = _watch_modules(lib, modules)
        if os.environ.get("NANPROV_COMPILED_PATHS", "1") != "0":
            _watcher.watch("torch._dynamo.output_graph", lambda m: _watch_compiled_graphs(lib, torch, m, modules))
        eager_flex.install(torch, _say)
        _watcher.watch("torch._inductor.config", lambda config: compiled_flex.install(torch, config, _say))
        count_unprobed = lambda what: lib.nanprov_count_unprobed(what.encode(), 1)  # noqa: E731
        flash_attn_probes.watch(_watcher, torch, _say, count_unprobed)
        _guarded("nn.MultiheadAttention", lambda: plain_softmax.install_mha(torch, _say, count_unprobed))
        _watcher.watch("transformers.modeling_utils",
                       lambda m: _guarded("Hugging Face eager attention", lambda: plain_softmax.install_hf_eager(torch, _say, m)))
        unmatched = module_probes.install(torch, modules, _say)
        ops_unmatched = op_probes.install(torch, lib, _say)
        # Shutdown drops the resolver before the interpreter (and the callback) goes away.
        atexit.register(lambda: (unmatched and unmatched(), ops_unmatched and ops_unmatched(), lib.nanprov_shutdown(),
                                 resolver))
        _close_store_before_os_exit(lib)
        _report("instrumented")
    except Exception as exc:
        _say(f"probes not loaded, training continues uninstrumented: {exc}")
        _report("probe-error", str(exc))


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


def _guarded(what, install):
    try:
        install()
    except Exception as exc:  # never reaches the training
        _say(f"{what} is not probed ({type(exc).__name__}: {exc}); training continues")


def _watch_steps(lib, torch, modules):
    """Step = the most steps any one optimizer has taken, so two optimizers do not count twice.

    After each optimizer step the gradient sentinel checks the gradients it applied and the
    parameters it produced (torch.ops.nanprov.check_step: one asynchronous fused check), so a
    NaN made outside attention is named at its own step.
    """
    taken = weakref.WeakKeyDictionary()
    high = [0]
    check_step = torch.ops.nanprov.check_step
    sentinel = os.environ.get("NANPROV_SENTINEL", "1") != "0"
    failed = []

    def after_step(optimizer, args, kwargs):
        n = taken.get(optimizer, 0) + 1
        taken[optimizer] = n
        if sentinel:
            try:
                grads, params, names = [], [], []
                if not modules.named_from_stack:
                    modules.name_from_stack(sys._getframe(1))
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is not None and not p.grad.is_sparse:
                            grads.append(p.grad)
                            params.append(p)
                            names.append(modules.parameter_name(p))
                if grads:
                    check_step(grads, params, "\n".join(names), n - 1)
            except Exception as exc:  # never reaches the training; said once, not every step
                if not failed:
                    failed.append(exc)
                    _say(f"gradient sentinel failed, gradients are not checked: {exc}")
        if n > high[0]:
            high[0] = n
            lib.nanprov_step(n)

    importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(after_step)


def _clean_path(path):
    """A module path as the user wrote the model: torch.compile's wrapper adds `_orig_mod`."""
    return ".".join(part for part in path.split(".") if part and part != "_orig_mod")


_DYNAMO_PREFIX = re.compile(r"^L\['[^']*'\]\.?")
_DYNAMO_ITEM = re.compile(r"\._modules\['([^']*)'\]|\[(\d+)\]|\['([^']*)'\]")


def _dynamo_path(text):
    """`L['self'].layers[0]._modules['attn']` (Dynamo's nn_module_stack) → `layers.0.attn`."""
    text = _DYNAMO_PREFIX.sub("", text)
    text = _DYNAMO_ITEM.sub(lambda m: "." + next(g for g in m.groups() if g is not None), text)
    return _clean_path(text)


class _ModulePaths:
    """Module paths and parameter names of the models seen running attention.

    A module is named by its path from the outermost module on the stack the first time it runs
    attention. Under activation checkpointing the recompute runs from the checkpointed block, so
    there the outermost module is the block itself: the path of the first, full forward is kept.
    """

    def __init__(self, torch):
        self.module_type = torch.nn.Module
        self.graph_module_type = torch.fx.GraphModule
        self.roots = weakref.WeakKeyDictionary()  # outermost module -> {module -> path}
        self.best = weakref.WeakKeyDictionary()   # module -> longest path seen
        self.parameters = {}  # id(parameter) -> (weakref, name): tensors compare elementwise
        self.compiled = threading.local()         # stack of compiled graphs running
        self.not_modules = set()  # code objects whose `self` is not a module: never read again
        self.named_from_stack = False

    def _wrapper(self, obj):
        # Frames of these run the user's modules but are not modules of the model.
        return isinstance(obj, self.graph_module_type) or type(obj).__name__ == "OptimizedModule"

    def _table(self, inner, root):
        table = self.roots.get(root)
        if table is None or inner not in table:  # first call, or modules were added since
            table = weakref.WeakKeyDictionary((m, _clean_path(name)) for name, m in root.named_modules())
            self.roots[root] = table
            for name, p in root.named_parameters():
                known = self.parameters.get(id(p))
                if known is None or known[0]() is not p:
                    self.parameters[id(p)] = (weakref.ref(p), _clean_path(name))
        return table

    def current(self, frame):
        """The module path of the attention call running in `frame`'s thread.

        Reading a frame's `self` builds a dict of all its locals (f_locals), so the walk stops at
        the innermost module once that module's path is known: one f_locals per call instead of
        one per frame of the stack. A module's path is thus fixed by the first call that ran it,
        which is the full forward: activation checkpointing recomputes later, from the block.
        """
        inner = root = None
        path = None
        while frame is not None:
            code = frame.f_code
            if code.co_argcount and code.co_varnames[0] == "self" and code not in self.not_modules:
                obj = frame.f_locals.get("self")
                if not isinstance(obj, self.module_type):
                    self.not_modules.add(code)  # a method of a class that is not a module
                elif not self._wrapper(obj):
                    if inner is None:
                        inner = obj
                        path = self.best.get(inner)
                        if path is not None:
                            break
                    root = obj
            frame = frame.f_back
        if inner is not None and path is None:
            path = self._table(inner, root).get(inner, "")
            self.best[inner] = path
        path = path or ""
        graphs = getattr(self.compiled, "stack", None)
        if graphs:
            # Inside a compiled graph: the path within it, in the order its attention runs.
            graph = graphs[-1]
            if graph.paths:
                inside = graph.paths[graph.next % len(graph.paths)]
                graph.next += 1
                path = f"{path}.{inside}" if path and inside else (path or inside)
        return path

    def name_from_stack(self, frame):
        """Names parameters from the models the training code holds, once, at the first optimizer
        step: a model whose attention nanprov did not see running (MHA's eager path, hand-written
        attention) still has its parameters named as the model names them (`layers.1.in_proj_weight`).
        The largest model first, so a submodule held on its own does not shorten the paths."""
        self.named_from_stack = True
        found = {}
        depth = 0
        while frame is not None and depth < 32:
            for scope in (frame.f_locals, frame.f_globals):
                for value in list(scope.values()):
                    if isinstance(value, self.module_type):
                        found[id(value)] = value
            frame, depth = frame.f_back, depth + 1
        for root in sorted(found.values(), key=lambda m: -sum(1 for _ in m.parameters())):
            self._table(root, root)

    def parameter_name(self, p):
        known = self.parameters.get(id(p))
        return known[1] if known is not None and known[0]() is p else ""


def _watch_modules(lib, modules):
    """Tells the probes which module runs an attention call ("model.layers.3.self_attn").

    Asked, not pushed: the probes call back on each forward attention call, and the path is
    found by walking this thread's Python stack to the innermost frame whose `self` is a module.
    Global module hooks would tax every module call of the model instead.
    """

    def resolve(buffer, capacity):
        try:
            path = modules.current(sys._getframe(1)).encode()
            # Never cut inside a UTF-8 character: drop continuation bytes at the cut.
            cut = min(len(path), capacity - 1)
            while 0 < cut < len(path) and (path[cut] & 0xC0) == 0x80:
                cut -= 1
            ctypes.memmove(buffer, path, cut)
            return cut
        except Exception:
            return 0  # never let a lookup failure reach the training

    callback = _Resolver(resolve)
    lib.nanprov_set_module_resolver(callback)
    return callback  # kept alive by the caller: the probes hold only its address


# Graph nodes that make one probed attention call each at run time (the fast-path encoder layer
# makes its one through the MHA op inside it).
_PROBED_IN_GRAPHS = ("scaled_dot_product", "_native_multi_head_attention", "_transformer_encoder_layer_fwd")
# Attention a compiled graph may hold that runs as no probed ATen op at run time: probed only
# where compiled_flex's Inductor pass brackets it, counted as unprobed where it did not.
_FOREIGN_IN_GRAPHS = ("flex_attention",)


class _CompiledGraph:
    """One graph Dynamo compiled: its attention calls' module paths, in graph order, and how many
    calls of each foreign kind (FlexAttention) it holds."""

    def __init__(self, gm, foreign_probed):
        self.paths, self.foreign = [], {}
        for node in gm.graph.nodes:
            name = getattr(node.target, "__name__", str(node.target))
            if node.op != "call_function":
                continue
            # By name and by text: a higher-order op's __name__ differs across torch versions
            # ("flex_attention", or only str(target) names it).
            foreign = [u for u in _FOREIGN_IN_GRAPHS if u in name or u in str(node.target)]
            if foreign and "backward" not in name:
                self.foreign[foreign[0]] = self.foreign.get(foreign[0], 0) + 1
            if any(probed in name for probed in _PROBED_IN_GRAPHS) or (foreign and foreign_probed):
                stack = node.meta.get("nn_module_stack") or {}
                entries = list(stack.values())
                self.paths.append(_dynamo_path(entries[-1][0]) if entries else "")
        self.next = 0


def _watch_compiled_graphs(lib, torch, output_graph, modules):
    """Module paths inside torch.compile'd code, where no module frame runs.

    Every graph Dynamo hands to a backend is read once for the module path of each attention
    node (its nn_module_stack); the compiled function is wrapped so that, while it runs, the
    attention calls it makes are named in that order. The compiled code itself is untouched.
    """
    cls = output_graph.OutputGraph
    original = cls.call_user_compiler

    def call_user_compiler(self, gm, *args, **kwargs):
        compiled = original(self, gm, *args, **kwargs)
        try:
            graph = _CompiledGraph(gm, compiled_flex.installed())
        except Exception:
            return compiled
        if not graph.paths and not graph.foreign:
            return compiled

        def run(*a, **k):
            stack = getattr(modules.compiled, "stack", None)
            if stack is None:
                stack = modules.compiled.stack = []
            graph.next = 0
            stack.append(graph)
            recorded_before = lib.nanprov_foreign_calls()
            lib.nanprov_compiled_grad_mode(1 if torch.is_grad_enabled() else 0)
            try:
                return compiled(*a, **k)
            finally:
                lib.nanprov_compiled_grad_mode(-1)
                stack.pop()
                # FlexAttention calls recorded while the graph ran: bracketed by compiled_flex's
                # pass, or run eagerly (the eager backend); the rest went unseen.
                unseen = sum(graph.foreign.values()) - (lib.nanprov_foreign_calls() - recorded_before)
                for what, n in graph.foreign.items():
                    n = min(n, unseen)
                    if n > 0:
                        lib.nanprov_count_unprobed(what.encode(), n)
                        unseen -= n

        run.__wrapped__ = compiled
        return run

    cls.call_user_compiler = call_user_compiler
