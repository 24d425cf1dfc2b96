"""`nanprov run --trail`: every module call's output and input gradient is checked, so that an
origin outside attention is named by the first module that made the non-finite value.

One global forward hook, installed once, hands each module call's tensors (however nested in
lists, tuples, dicts, dataclasses and Hugging Face ModelOutputs, positional or keyword) to
torch.ops.nanprov.trail_forward (probes/libtorch/module_trail.h), which checks them
asynchronously and, in training, hooks the call's gradients in C++. A module is numbered and named
(its path from the outermost module running, as the attention probes name theirs) the first time
it runs; later calls look its number up by the module object. The hook only reads: it returns
None, so every output is the module's own. A module that looks like attention by its name (the
probes decide) also gets a forward pre-hook and hook of its own, so the probes can tell whether
attention they check ran inside it.

Inside torch.compile'd code no module hook runs: compiled_trail.py puts the same check into the
graph, where Inductor writes the values to memory anyway, numbered from the same counter, and
into the backward graph AOTAutograd compiles for it. The store's meta says a compiled graph ran
(trail_compiled), and whether its modules' backward was checked (trail_compiled_backward), so the
report can say so.
"""

import inspect
import os
import sys
import weakref


def enabled():
    return os.environ.get("NANPROV_TRAIL", "0") == "1"


# How far the walk into what a module receives or returns goes: a batch that is a dict of lists of
# tensors is three containers deep, and a module call is rarely handed more values than this. A
# walk that stops at either bound says so, and the module is not said to have had finite inputs.
_MAX_DEPTH = 6
_MAX_VALUES = 512
# Values that hold no tensor; anything else that is not a container is an object the walk does not
# look into (a custom batch class, a cache object): it may hold one.
_LEAVES = (int, float, complex, bool, str, bytes, type(None), type(Ellipsis), slice, range)


def _tensors(value, tensor_type, out, leaves=_LEAVES):
    """Appends the tensors in `value`: itself, or inside tuples, lists, dicts (a Hugging Face
    ModelOutput is one), sets and dataclasses, however nested, up to the bounds above. Returns
    whether it saw everything: False when it stopped at a bound or met an object it does not look
    into. The common case (a tensor, or a tuple of tensors and flags) allocates nothing but `out`."""
    if isinstance(value, tensor_type):
        out.append(value)
        return True
    whole, left, depth, pending = True, _MAX_VALUES, _MAX_DEPTH, None
    while True:
        if isinstance(value, (tuple, list, set, frozenset)):
            items = value
        elif isinstance(value, dict):
            items = value.values()
        else:
            fields = getattr(type(value), "__dataclass_fields__", None)
            if fields is None:
                whole = False  # an object of another kind: not looked into
                items = ()
            else:
                items = [getattr(value, name, None) for name in fields]
        if items:
            if depth == 0 or len(items) > left:
                whole = False
            else:
                left -= len(items)
                for item in items:
                    if isinstance(item, tensor_type):
                        out.append(item)
                    elif not isinstance(item, leaves):
                        if pending is None:
                            pending = []
                        pending.append((item, depth - 1))
        if not pending:
            return whole
        value, depth = pending.pop()


class Numbers:
    """Module numbers from one counter, for the forward hook and the compiled graphs: each number
    is named to the probes once."""

    def __init__(self, trail_module):
        self.trail_module = trail_module
        self.next = 0  # not a count of live modules: modules that are gone keep theirs
        self.attention = set()  # the numbers of modules that look like attention (the probes say)

    def take(self, named):
        """Numbers the (path, class name, unchecked paths) in `named` consecutively; returns the first."""
        # Reserved before naming: an op call lets other threads run, and they must not take these.
        first = self.next
        self.next += len(named)
        for i, (path, cls, unchecked) in enumerate(named):
            if self.trail_module(first + i, path, cls, "\n".join(unchecked)):
                self.attention.add(first + i)
        return first

    def attention_like(self, n):
        return n in self.attention


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
    trail_enter, trail_leave = ops.trail_enter, ops.trail_leave
    numbers = Numbers(ops.trail_module)
    tensor_type = torch.Tensor
    is_compiling = torch.compiler.is_compiling
    ids = weakref.WeakKeyDictionary()  # module -> its number (-1: torch.compile's wrapper)

    def number(module, frame):
        # The walk finds this module's own frame (_call_impl's self) as the innermost, and names
        # it from the outermost module running, once.
        n = ids[module] = numbers.take([(modules.current(frame), type(module).__name__, ())])
        if numbers.attention_like(n):
            # From its next call on, the probes learn where each call began and ended, and count
            # it as unchecked attention when no attention they check ran inside it. Registered
            # now, its forward hook runs after the module's own (a --probe-module's record).
            module.register_forward_pre_hook(lambda _module, _args, n=n: bracket(trail_enter, n))
            module.register_forward_hook(lambda _module, _args, _output, n=n: bracket(trail_leave, n))
        return n

    def bracket(op, n):
        if is_compiling():
            return None
        try:
            op(n)
        except Exception as exc:  # never reaches the training
            say_once(
                "enter",
                f"--trail: attention-like modules are not watched ({type(exc).__name__}: {exc}); training continues",
            )
        return None

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
            outputs = []
            _tensors(output, tensor_type, outputs)
            if outputs:
                inputs = []
                whole = _tensors(args, tensor_type, inputs)
                if kwargs:
                    whole = _tensors(kwargs, tensor_type, inputs) and whole
                trail_forward(n, inputs, outputs, whole)
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
