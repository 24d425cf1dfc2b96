"""Runs a callback right after a module finished importing: how the bootstrap waits for torch,
and for the torch modules it hooks only when the training uses them."""

import importlib.util
import sys


class ImportWatcher:
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
