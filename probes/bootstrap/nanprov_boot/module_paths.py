"""Module paths of attention calls ("model.layers.3.self_attn") and parameter names, found from
the Python stack, for the probes to name calls and the gradient sentinel to name parameters."""
import ctypes
import re
import sys
import threading
import weakref

from .probe_library import Resolver


# Attributes under which wrappers hold the user's module: torch.compile (`_orig_mod`), FSDP1 and
# activation checkpointing's wrapper. They are not part of the model as the user wrote it.
_WRAPPER_PARTS = frozenset(("_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"))
# Wrappers whose frames run the user's model from outside it: their own path component (DDP's
# `module.`) would start every name.
_WRAPPER_CLASSES = frozenset(("OptimizedModule", "DistributedDataParallel", "DataParallel"))


def clean_path(path):
    """A module path as the user wrote the model, without the wrappers' parts."""
    return ".".join(part for part in path.split(".") if part and part not in _WRAPPER_PARTS)


def unwrapped(module):
    """The user's model inside DDP, DataParallel and torch.compile's wrappers."""
    while type(module).__name__ in _WRAPPER_CLASSES:
        inner = getattr(module, "module", None)  # not `or`: an empty Sequential is false
        if inner is None:
            inner = getattr(module, "_orig_mod", None)
        if inner is None:
            break
        module = inner
    return module


_DYNAMO_PREFIX = re.compile(r"^L\['[^']*'\]\.?")
_DYNAMO_ITEM = re.compile(r"\._modules\['([^']*)'\]|\[(\d+)\]|\['([^']*)'\]")


def dynamo_path(text):
    """`L['self'].layers[0]._modules['attn']` (Dynamo's nn_module_stack) → `layers.0.attn`."""
    text = _DYNAMO_PREFIX.sub("", text)
    text = _DYNAMO_ITEM.sub(lambda m: "." + next(g for g in m.groups() if g is not None), text)
    return clean_path(text)


class ModulePaths:
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
        return isinstance(obj, self.graph_module_type) or type(obj).__name__ in _WRAPPER_CLASSES

    def _table(self, inner, root):
        table = self.roots.get(root)
        if table is None or inner not in table:  # first call, or modules were added since
            table = weakref.WeakKeyDictionary((m, clean_path(name)) for name, m in root.named_modules())
            self.roots[root] = table
            self._name_parameters(root)
        return table

    def _name_parameters(self, root):
        for name, p in root.named_parameters():
            known = self.parameters.get(id(p))
            if known is None or known[0]() is not p:
                self.parameters[id(p)] = (weakref.ref(p), clean_path(name))

    def current(self, frame):
        """The module path of the attention call running in `frame`'s thread: the innermost
        module running eagerly (eager_path), and inside a compiled graph the path within it."""
        path = self.eager_path(frame)
        graphs = getattr(self.compiled, "stack", None)
        if graphs:
            # Inside a compiled graph: the path within it, in the order its attention runs.
            graph = graphs[-1]
            if graph.paths:
                inside = graph.paths[graph.next % len(graph.paths)]
                graph.next += 1
                path = f"{path}.{inside}" if path and inside else (path or inside)
        return path

    def eager_path(self, frame):
        """The path of the innermost module whose Python frame runs in `frame`'s thread.

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
        return path or ""

    def name_from_stack(self, frame):
        """Names parameters from the models the training code holds, once, at the first optimizer
        step: a model whose attention nanprov did not see running (MHA's eager path, hand-written
        attention) still has its parameters named as the model names them (`layers.1.in_proj_weight`).
        Asked again when parameters have no name yet: FSDP2 puts its sharded parameters (DTensors)
        on the model after the model first ran, and during a forward the model holds its unsharded
        ones. The largest model first, so a submodule held on its own does not shorten the paths."""
        self.named_from_stack = True
        found = {}
        depth = 0
        while frame is not None and depth < 32:
            for scope in (frame.f_locals, frame.f_globals):
                for value in list(scope.values()):
                    if isinstance(value, self.module_type):
                        found[id(value)] = value
            frame, depth = frame.f_back, depth + 1
        models = {id(m): m for m in map(unwrapped, found.values())}
        for root in sorted(models.values(), key=lambda m: -sum(1 for _ in m.parameters())):
            self._table(root, root)
            self._name_parameters(root)

    def parameter_name(self, p):
        known = self.parameters.get(id(p))
        return known[1] if known is not None and known[0]() is p else ""


def install_resolver(lib, modules):
    """Tells the probes which module runs an attention call ("model.layers.3.self_attn").

    Asked, not pushed: the probes call back for a forward attention call, and the path is found
    by walking this thread's Python stack to the innermost frame whose `self` is a module. Once
    the probes trust the parameter behind a call's Q to name its module, they stop asking
    (probes/libtorch/module_path_cache.h). Module hooks would tax every module call instead, and
    a hook in a module's hook dict would make torch.save(model) fail to pickle it.
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

    callback = Resolver(resolve)
    lib.nanprov_set_module_resolver(callback)
    return callback  # kept alive by the caller: the probes hold only its address
