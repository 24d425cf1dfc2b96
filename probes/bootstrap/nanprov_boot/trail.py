"""`nanprov run --trail`: every module call's output and input gradient is checked, so that an
origin outside attention is named by the first module that made the non-finite value.

One global forward hook, installed once, hands each module call's tensors to
torch.ops.nanprov.trail_forward (probes/libtorch/module_trail.h), which checks them
asynchronously and, in training, hooks the call's gradients in C++. A module is numbered and named
(its path from the outermost module running, as the attention probes name theirs) the first time
it runs; later calls look its number up by the module object. The hook only reads: it returns
None, so every output is the module's own.

Inside torch.compile'd code no module hook runs: compiled_trail.py puts the same check into the
graph, where Inductor writes the values to memory anyway, numbered from the same counter. The
store's meta says a compiled graph ran (trail_compiled): its modules' backward is not checked, and
the report can say so.
"""
import inspect
import os
import sys
import weakref


def enabled():
    return os.environ.get("NANPROV_TRAIL", "0") == "1"


def _tensors(value, tensor_type, out):
    """The tensors of an argument or a result: itself, or one level into a tuple, list or dict."""
    if isinstance(value, tensor_type):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        out.extend(v for v in value if isinstance(v, tensor_type))
    elif isinstance(value, dict):  # a Hugging Face ModelOutput is one
        out.extend(v for v in value.values() if isinstance(v, tensor_type))
    return out


class Numbers:
    """Module numbers from one counter, for the forward hook and the compiled graphs: each number
    is named to the probes once."""

    def __init__(self, trail_module):
        self.trail_module = trail_module
        self.next = 0  # not a count of live modules: modules that are gone keep theirs

    def take(self, named):
        """Numbers the (path, class name, unchecked paths) in `named` consecutively; returns the first."""
        # Reserved before naming: an op call lets other threads run, and they must not take these.
        first = self.next
        self.next += len(named)
        for i, (path, cls, unchecked) in enumerate(named):
            self.trail_module(first + i, path, cls, "\n".join(unchecked))
        return first


numbers = None  # the run's Numbers, once install() ran with --trail
_say = None
_said = set()


def say_once(kind, message):
    """A failure of the trail, said once for each kind: it never reaches the training."""
    if _say is not None and kind not in _said:
        _said.add(kind)
        _say(message)


def install(torch, lib, modules, say):
    global numbers, _say
    if not enabled():
        return
    _say = say
    ops = torch.ops.nanprov
    trail_forward = ops.trail_forward
    numbers = Numbers(ops.trail_module)
    tensor_type = torch.Tensor
    is_compiling = torch.compiler.is_compiling
    ids = weakref.WeakKeyDictionary()  # module -> its number (-1: torch.compile's wrapper)

    def number(module, frame):
        # The walk finds this module's own frame (_call_impl's self) as the innermost, and names
        # it from the outermost module running, once.
        n = ids[module] = numbers.take([(modules.current(frame), type(module).__name__, ())])
        return n

    def hook(module, args, kwargs, output):
        # Nothing of this may reach a graph Dynamo traces: it traces global module hooks.
        if is_compiling():
            return None
        try:
            n = ids.get(module)
            if n is None:
                if type(module).__name__ == "OptimizedModule":  # torch.compile's wrapper: its insides ran compiled
                    ids[module] = -1
                    lib.nanprov_trail_compiled()
                    return None
                n = number(module, inspect.currentframe().f_back)
            if n < 0:
                return None
            outputs = _tensors(output, tensor_type, [])
            if outputs:
                inputs = _tensors(args, tensor_type, [])
                for value in kwargs.values():
                    _tensors(value, tensor_type, inputs)
                trail_forward(n, inputs, outputs)
        except Exception as exc:  # never reaches the training
            say_once("hook", f"--trail: module calls are not checked ({type(exc).__name__}: {exc}); training continues")
        return None

    torch.nn.modules.module.register_module_forward_hook(hook, with_kwargs=True)
    _hook_codes.append(hook.__code__)
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is not None:  # Dynamo was imported before the probes: compiled_graphs' watch has run
        keep_out_of_dynamo_frames(eval_frame)


_hook_codes = []  # the forward hook's code, once installed


def keep_out_of_dynamo_frames(eval_frame):
    """Runs the forward hook as plain Python where it runs as a frame of its own.

    Where compiled code breaks its graph at a module call, the call runs eagerly, but Dynamo still
    compiles each Python frame it runs, this hook's included. Traced, is_compiling() is True and
    the hook compiles to nothing, so those modules went unchecked (a user's own module hooks that
    break the graph are enough). Skipping the hook's frame leaves it eager there; inside a traced
    graph Dynamo still inlines it, and it adds nothing to the graph."""
    skip = getattr(eval_frame, "skip_code", None)
    if skip is not None:
        for code in _hook_codes:
            skip(code)
