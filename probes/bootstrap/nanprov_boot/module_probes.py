"""`nanprov run --probe-module SPEC`: attention that runs as no op nanprov can wrap (hand-written
softmax(Q K^T) V, or a library's own module) is checked at its module's boundary.

SPEC is `PATTERN[:q=ARG,k=ARG,v=ARG]`, or a preset name (PRESETS). PATTERN is a shell glob over
the module's class name, or, when it holds a '.', over its module path ("layers.*.attn"). ARG is a
forward argument, by position (0 is the first after self) or by name; by default q=0, k=1, v=2, and
a missing k or v is the one before it (self-attention modules take one x). O is the forward's
output, or its first element.

A forward pre-hook on each matching module opens the call (torch.ops.nanprov.begin_call: named, its
kernels traced from here) and a forward hook records it after it ran (record_call): checked, named
and captured like any forward call, with op `module:<Class>` and backend `module`. In training,
tensor hooks then collect dO (on O, which opens the backward call) and dQ, dK, dV (on the inputs,
one gradient per distinct tensor: a self-attention x gives dQ only), and record_backward records
the backward call, linked to its forward. Kernels autograd runs between dO and the last input
gradient are attributed to the backward, including those of other branches that interleave. The input
gradients are the inputs' whole gradients: if Q, K or V also feed something else, that is in them.
Modules are found by a global forward pre-hook that looks at each module object once. A matched
module inside which nanprov checked an attention call (SDPA, or softmax(q kᵀ) v written in plain
ops, which nanprov checks by default) records nothing of its own: that call was recorded with its
real Q, K and V, where the module's arguments may be its hidden states.
"""

import fnmatch
import inspect
import os
import weakref

# Presets for attention modules of libraries nanprov knows the call signature of. Each assumes:
#   te: TransformerEngine's DotProductAttention.forward(query_layer, key_layer, value_layer, ...);
#       any qkv_format is checked, but only [B, H, S, D] replays (sbhd, bshd and thd do not).
PRESETS = {"te": "DotProductAttention:q=query_layer,k=key_layer,v=value_layer"}


class Spec:
    def __init__(self, text):
        self.text = text
        self.pattern, _, mapping = PRESETS.get(text, text).partition(":")
        self.args = {}
        for pair in filter(None, mapping.split(",")):
            key, _, value = pair.partition("=")
            self.args[key] = int(value) if value.isdigit() else value
        self.by_path = "." in self.pattern
        self.matched = False


def _pick(spec, role, args, kwargs, signature):
    where = spec.args.get(role, {"q": 0, "k": 1, "v": 2}[role])
    if isinstance(where, int):
        return args[where] if where < len(args) else None
    if where in kwargs:
        return kwargs[where]
    try:
        return signature.bind_partial(*args, **kwargs).arguments.get(where) if signature else None
    except TypeError:
        return None


def watch_backward(ops, op, q, k, v, o, backend="module", scale=None, mask=None, view=None):
    """Records the call's backward once dO and every expected input gradient arrived, bracketed from
    dO's arrival (begin_call) so the kernels autograd runs in between are attributed to it. The
    hooks only read: they return None, so autograd's gradients are untouched.

    `view`, when given, maps each watched tensor and its gradient to the call's (B, H, S, D)
    layout ((tensor, role) -> tensor): the tensors autograd sees may be the call's in another shape
    (nn.MultiheadAttention projects to (L, B, E))."""
    shape = view or (lambda t, role: t)
    inputs = [("dQ", q)]
    if k is not q:
        inputs.append(("dK", k))
    if v is not q and v is not k:
        inputs.append(("dV", v))
    expected = {name for name, t in inputs if t.requires_grad}
    grads = {}
    fwd = {role: shape(t.detach(), role) for role, t in (("Q", q), ("K", k), ("V", v), ("O", o))}

    def arrived(name, grad):
        grads[name] = shape(grad.detach(), name[1:])
        if name == "dO":
            ops.begin_call(fwd["Q"], fwd["O"])
        if "dO" in grads and expected <= grads.keys():
            ops.record_backward(
                fwd["Q"],
                fwd["K"],
                fwd["V"],
                fwd["O"],
                grads["dO"],
                grads.get("dQ"),
                grads.get("dK"),
                grads.get("dV"),
                scale,
                False,
                "bhsd",
                None,
                None,
                op,
                backend,
                mask,
            )

    o.register_hook(lambda g: arrived("dO", g))
    for name, t in inputs:
        if t.requires_grad:
            t.register_hook(lambda g, name=name: arrived(name, g))


def install(torch, modules, say):
    text = os.environ.get("NANPROV_PROBE_MODULES", "")
    specs = [Spec(t) for t in text.split(";") if t]
    if not specs:
        return
    ops = torch.ops.nanprov
    fake = __import__("torch._subclasses.fake_tensor", fromlist=["is_fake"])
    empty = torch.empty(0)  # begin_call's device when the module gives no Q: the CPU, nothing traced
    seen = weakref.WeakKeyDictionary()  # module -> its Spec, or None: each module is matched once
    ran = {"modules": False}  # whether this process ran any module (seen forgets modules that are gone)

    def matching(module, frame):
        name = type(module).__name__
        for spec in specs:
            if not spec.by_path and fnmatch.fnmatchcase(name, spec.pattern):
                return spec
        if any(spec.by_path for spec in specs):
            path = modules.current(frame)
            for spec in specs:
                if spec.by_path and fnmatch.fnmatchcase(path, spec.pattern):
                    return spec
        return None

    def forward_hooks_for(spec, module):
        try:
            signature = inspect.signature(module.forward)
        except (TypeError, ValueError):
            signature = None
        op = f"module:{type(module).__name__}"

        # The forward is bracketed from its pre-hook, so the kernels it runs are attributed to it.
        def pre_hook(mod, args, kwargs):
            if torch.compiler.is_compiling():
                return
            try:
                q = _pick(spec, "q", args, kwargs, signature)
                ops.begin_call(q.detach() if isinstance(q, torch.Tensor) and not fake.is_fake(q) else empty, None, True)
            except Exception:
                pass

        def hook(mod, args, kwargs, output):
            if torch.compiler.is_compiling():
                return
            try:
                if ops.checked_inside():  # recorded inside, with its real Q, K, V
                    ops.abandon_call()
                    return
                q = _pick(spec, "q", args, kwargs, signature)
                k = _pick(spec, "k", args, kwargs, signature)
                v = _pick(spec, "v", args, kwargs, signature)
                k = q if k is None and "k" not in spec.args else k
                v = k if v is None and "v" not in spec.args else v
                o = output[0] if isinstance(output, (tuple, list)) and output else output
                tensors = (q, k, v, o)
                if not all(isinstance(t, torch.Tensor) for t in tensors) or any(fake.is_fake(t) for t in tensors):
                    ops.abandon_call()
                    if not getattr(hook, "warned", False):
                        hook.warned = True
                        say(
                            f"--probe-module '{spec.text}': {op} did not give tensors for Q, K, V and O; "
                            f"name its arguments, e.g. '{spec.pattern}:q=query,k=key,v=value'"
                        )
                    return
                ops.record_call(
                    q.detach(),
                    k.detach(),
                    v.detach(),
                    o.detach(),
                    None,
                    None,
                    False,
                    "bhsd",
                    None,
                    None,
                    op,
                    "module",
                    "",
                )
                if torch.is_grad_enabled() and o.requires_grad:
                    watch_backward(ops, op, q, k, v, o)
            except Exception as e:  # never let the probe reach the training
                ops.abandon_call()
                if not getattr(hook, "failed", False):
                    hook.failed = True
                    say(f"module probe failed, this call is not recorded: {type(e).__name__}: {e}")

        return pre_hook, hook

    # Both hooks return at once while Dynamo traces: it traces global module hooks into the graph,
    # and nothing here may reach a compiled graph (the WeakKeyDictionary alone breaks tracing).
    # Compiled modules are looked at when they run eagerly, or not at all.
    def pre_hook(module, args):
        if torch.compiler.is_compiling():
            return
        try:
            if module in seen:
                return
            spec = matching(module, inspect.currentframe().f_back)
            seen[module] = spec
            ran["modules"] = True
            if spec is not None:
                spec.matched = True
                before, after = forward_hooks_for(spec, module)
                module.register_forward_pre_hook(before, with_kwargs=True)
                module.register_forward_hook(after, with_kwargs=True)
                # This call's pre-hooks were chosen before `before` existed (its forward hooks are
                # chosen after the forward): it opens this call's bracket itself, so the record
                # at its end has one (keyword arguments are not seen here).
                before(module, args, {})
        except Exception:
            pass

    torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)

    def unmatched():
        if not ran["modules"]:  # a process that ran no module (an Inductor compile worker) has nothing to say
            return
        for spec in specs:
            if not spec.matched:
                say(
                    f"--probe-module '{spec.text}' matched no module that ran eagerly: nothing was checked for it "
                    "(modules inside torch.compile'd code run no hooks of nanprov's)"
                )

    return unmatched
