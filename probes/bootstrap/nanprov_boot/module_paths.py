"""Module paths of attention calls ("model.layers.3.self_attn") and parameter names, found from
the Python stack, for the probes to name calls and the gradient sentinel to name parameters."""

import ctypes
import re
import sys
import threading
import weakref

from .module_tree import ModuleTree
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


def _joined(prefix, path):
    return f"{prefix}.{path}" if prefix and path else (prefix or path)


def dynamo_path(text):
    """`L['self'].layers[0]._modules['attn']` (Dynamo's nn_module_stack) → `layers.0.attn`."""
    text = _DYNAMO_PREFIX.sub("", text)
    text = _DYNAMO_ITEM.sub(lambda m: "." + next(g for g in m.groups() if g is not None), text)
    return clean_path(text)


class ModulePaths:
    """Module paths and parameter names of the models seen running attention.

    A module is named by its path from the outermost module holding it (module_tree.py), the
    first time it runs attention: whether the model's forward called it or the training loop did.
    Under activation checkpointing the recompute runs from the checkpointed block: the path of the
    first, full forward is kept.
    """

    def __init__(self, torch):
        self.module_type = torch.nn.Module
        self.graph_module_type = torch.fx.GraphModule
        self.tree = ModuleTree(torch, self._wrapper)
        self.roots = weakref.WeakKeyDictionary()  # outermost module -> {module -> path}
        self.prefixes = weakref.WeakKeyDictionary()  # outermost module -> the name it is known by
        self.best = weakref.WeakKeyDictionary()  # module -> longest path seen
        self.parameters = {}  # id(parameter) -> (weakref, name): tensors compare elementwise
        self.compiled = threading.local()  # stack of compiled graphs running
        self.not_modules = set()  # code objects whose `self` is not a module: never read again
        self.named_from_stack = False

    def _wrapper(self, obj):
        # Frames of these run the user's modules but are not modules of the model.
        return isinstance(obj, self.graph_module_type) or type(obj).__name__ in _WRAPPER_CLASSES

    def _table(self, inner, root):
        table = self.roots.get(root)
        if table is None or inner not in table:  # first call, or modules were added since
            prefix = self.prefixes.get(root, "")
            table = weakref.WeakKeyDictionary(
                (m, _joined(prefix, clean_path(name))) for name, m in root.named_modules()
            )
            self.roots[root] = table
            self._name_parameters(root, prefix)
        return table

    def _name_parameters(self, root, prefix):
        for name, p in root.named_parameters():
            full = _joined(prefix, clean_path(name))
            known = self.parameters.get(id(p))
            # A name learnt from a block alone gives way to its path in the model holding it.
            if known is None or known[0]() is not p or (known[1] != full and full.endswith("." + known[1])):
                self.parameters[id(p)] = (weakref.ref(p), full)

    def _path(self, inner, root, frame):
        """`inner`'s path: `root` is the outermost module running, the training loop may hold more."""
        outer = top = self.tree.outermost(root)
        if inner is not top and inner not in self._table(inner, top):
            top = self.tree.outermost(inner)  # held where registration does not see: a plain list
        self._name_top(top, frame, running=top is root, holders=[outer] if top is not outer else [])
        return self._table(inner, top).get(inner, "")

    def _name_top(self, top, frame, running, holders=(), models=None):
        """Fixes, once, the name an outermost module is known by (its paths' prefix): '' for the
        model; a plain container's name and index for a module held in a list, tuple or dict; the
        variable holding it for one of several separate models the training loop drives itself
        (module_tree.py). The first answer stays, as a module's path does."""
        if top in self.prefixes:
            return
        prefix = ""
        held = self.tree.container_name(top, frame, holders)
        if held is not None:
            holder, name = held
            prefix = (
                name
                if holder is None
                else _joined(self._table(holder, self.tree.outermost(holder)).get(holder, ""), name)
            )
        elif not running:
            models = self.tree.separate_models(frame, unwrapped) if models is None else models
            if len(models) > 1 and id(top) in models:
                prefix = models[id(top)][0]
        self.prefixes[top] = prefix
        self.roots.pop(top, None)  # its table is made again, with the prefix

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
        start = frame
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
            path = self._path(inner, root, start)
            self.best[inner] = path
        return path or ""

    def name_from_stack(self, frame):
        """Names parameters from the models the training code holds, once, at the first optimizer
        step: a model whose attention nanprov did not see running (MHA's eager path, hand-written
        attention) still has its parameters named as the model names them (`layers.1.in_proj_weight`).
        Asked again when parameters have no name yet: FSDP2 puts its sharded parameters (DTensors)
        on the model after the model first ran, and during a forward the model holds its unsharded
        ones. Each is named from the outermost module holding it (module_tree.py), so a block the
        loop holds on its own (`for block in model.transformer.h`) does not shorten the paths, and
        separate pieces the loop drives (a stem, a bare nn.ModuleList, a head) are named apart."""
        self.named_from_stack = True
        found = {}
        for _, value in self.tree.variables(frame, inside_modules=True):  # a LightningModule's `self`
            items = value if isinstance(value, (list, tuple)) and len(value) < 10_000 else (value,)
            for item in items:
                if isinstance(item, self.module_type):
                    top = self.tree.outermost(unwrapped(item))
                    found[id(top)] = top
        models = self.tree.separate_models(frame, unwrapped)
        for top in sorted(found.values(), key=lambda m: -sum(1 for _ in m.parameters())):
            self._name_top(top, frame, running=False, models=models)
            self._table(top, top)
            self._name_parameters(top, self.prefixes.get(top, ""))

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
