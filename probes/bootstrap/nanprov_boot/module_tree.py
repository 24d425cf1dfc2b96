"""Which module holds which, whoever calls them.

The Python stack shows only the modules running: a block that the training loop calls itself
(`for block in model.transformer.h: x = block(x)`) runs with no frame of the model around it. So
nanprov also learns the module tree as the process builds it: every submodule registered on a
module (an attribute, an nn.ModuleList, add_module) tells who holds it. A module is then named by
its path from the outermost module holding it, whether that module's forward ran or not.

Modules held where registration does not see (a plain Python list or dict of blocks, as an
attribute of a module or a variable of the training script) are named by the container's name
and their index in it (`blocks.2.attn`). When the training holds several separate modules with
trainable parameters (a stem, a bare nn.ModuleList of blocks and a head, each a variable of the
loop), each is named by the variable that holds it, so that no two parameters or layers share a
name.
"""

import weakref

# Frames read looking for the training's variables: the loop is a few frames above any module.
_MAX_FRAMES = 32
_MAX_DEPTH = 64  # registration chains deeper than any model: a cycle, not a model


class ModuleTree:
    def __init__(self, torch, is_wrapper):
        self.module_type = torch.nn.Module
        self.is_wrapper = is_wrapper  # wrappers (DDP, torch.compile) are not part of the model
        self.parents = weakref.WeakKeyDictionary()  # module -> weak reference to its holder
        torch.nn.modules.module.register_module_module_registration_hook(self._registered)

    def _registered(self, holder, name, child):
        """Module registration's global hook: runs as models are built, never as they train."""
        try:
            if isinstance(child, self.module_type) and child is not holder:
                self.parents[child] = weakref.ref(holder)  # the latest holder: a module moved keeps its new one
                # Modules copied with copy.deepcopy (nn.TransformerEncoder's layers, `_get_clones`)
                # hold children that were never registered: they are learnt with their copy.
                pending = [child]
                while pending:
                    module = pending.pop()
                    for sub in module._modules.values():
                        if sub is not None and sub not in self.parents:
                            self.parents[sub] = weakref.ref(module)
                            pending.append(sub)
        except Exception:  # never in the way of building the model
            pass
        return None

    def outermost(self, module):
        """The outermost module holding `module` (itself when none does), below any wrapper."""
        seen = set()
        while id(module) not in seen and len(seen) < _MAX_DEPTH:
            seen.add(id(module))
            ref = self.parents.get(module)
            holder = ref() if ref is not None else None
            if holder is None or self.is_wrapper(holder):
                break
            module = holder
        return module

    def trainable(self, module):
        return any(p.requires_grad for p in module.parameters())

    def variables(self, frame, inside_modules=False):
        """(name, value) of the variables the training code holds in the frames from `frame`
        outwards, innermost first: the loop's locals, and the globals (each module's once).
        A module's own names (`self`, a block's `x`) are the training's only when asked."""
        depth = 0
        globals_seen = set()
        while frame is not None and depth < _MAX_FRAMES:
            if inside_modules or not self._in_module(frame):
                yield from list(frame.f_locals.items())
            if id(frame.f_globals) not in globals_seen:
                globals_seen.add(id(frame.f_globals))
                yield from list(frame.f_globals.items())
            frame, depth = frame.f_back, depth + 1

    def _in_module(self, frame):
        """A module's method, or a closure over its `self` (Module._call_impl's `inner` with hooks)."""
        code = frame.f_code
        local = frame.f_locals
        return (bool(code.co_argcount) and isinstance(local.get(code.co_varnames[0]), self.module_type)) or isinstance(
            local.get("self"), self.module_type
        )

    def separate_models(self, frame, unwrapped):
        """{id(outermost module): variable name} for each separate module with trainable parameters
        the training's variables hold (or hold in a list, tuple or dict: those are named by item)."""
        models = {}
        for name, value in self.variables(frame):
            if isinstance(value, self.module_type) and isinstance(name, str) and not name.startswith("_"):
                top = unwrapped(value)
                if self.outermost(top) is top and id(top) not in models:  # a variable naming a block names no model
                    models[id(top)] = (name, top)
        return {key: (name, top) for key, (name, top) in models.items() if self.trainable(top)}

    def container_name(self, module, frame, modules_running):
        """`blocks.2` for a module held in a plain list, tuple or dict: a variable of the training
        (`blocks`) or an attribute of a module running (`<its path>.blocks`); None when none holds it.
        Returns (the module holding the container or None, the name within it)."""
        for holder in modules_running:
            for top_module in holder.modules():
                for attr, value in vars(top_module).items():
                    if attr.startswith("_"):  # the module's own tables (_modules, hooks): registered, or not modules
                        continue
                    index = _index_in(value, module, self.module_type)
                    if index is not None:
                        return top_module, f"{attr}.{index}"
        for name, value in self.variables(frame):
            if isinstance(name, str) and not name.startswith("__"):
                index = _index_in(value, module, self.module_type)
                if index is not None:
                    return None, f"{name}.{index}"
        return None


def _index_in(container, module, module_type):
    """`module`'s index (or key) in a list, tuple or dict holding other modules beside it: a
    container of blocks, not an argument tuple or a one-model list."""
    if isinstance(container, (list, tuple)) and len(container) < 10_000:
        items = enumerate(container)
    elif isinstance(container, dict) and len(container) < 10_000:
        items = container.items()
    else:
        return None
    index, others = None, 0
    for key, item in items:
        if item is module and isinstance(key, (str, int)):
            index = str(key)
        elif isinstance(item, module_type):
            others += 1
    return index if index is not None and others else None
