"""FlashAttention 2, 3 and 4: their kernels run inside torch.autograd.Functions of their Python
packages, not as ATen ops nanprov sees at the dispatcher. When a package's interface module is
imported, the forward and backward of each of its autograd functions are wrapped (FLAVOURS below):
begin_call before (the call is named and its kernels are traced from there), record_call or
record_backward after, with the layout ("bshd", or "thd" for packed sequences with cu_seqlens),
causal flag and scale that replay needs. The wrappers return exactly what the function returned.
Saved for the backward on `ctx` are plain values only: a tensor there would tie the graph into a
reference cycle. Wrapping the autograd functions, not the `flash_attn_func` names, reaches every
caller, however it imported them (Hugging Face's "flash_attention_2"/"flash_attention_3" included).

Features replay does not model (dropout, softcap, a sliding window, ALiBi, score_mod / mask_mod,
learnable sinks, block sparsity, paged KV, seqused, fp8 descales) are named in the capture's note;
the call is still checked. Multi-latent attention (FA3/FA4 `qv`, or k is v at head_dim 512) and
kv-cache reads (`flash_attn_with_kvcache`: the cache's unused slots hold no data, so its K and V
cannot be checked whole) are counted as unchecked attention instead.
"""

import inspect

from .bracket import run_bracketed


class Flavour:
    """How one autograd function of one package takes and saves its tensors.

    inputs: the names of Q, K, V among the forward's arguments ("qkv" or "kv" for packed ones);
    saved_out: the index of O in ctx.saved_tensors (Q, K, V are always 0, 1, 2); saved_cu: the
    indices of cu_seqlens_q and cu_seqlens_k there, for varlen functions; unmodelled: argument
    names replay does not model; grads: how the backward's result gives dQ, dK, dV."""

    def __init__(self, cls, op, backend, saved_out, saved_cu=None, inputs=("q", "k", "v"), unmodelled=()):
        self.cls, self.op, self.backend, self.saved_out, self.saved_cu = cls, op, backend, saved_out, saved_cu
        self.inputs, self.unmodelled = inputs, unmodelled

    def qkv(self, a):
        if self.inputs == ("qkv",):
            return a["qkv"].unbind(-3)  # (B, S, 3, H, D) or (total, 3, H, D)
        if self.inputs == ("q", "kv"):
            k, v = a["kv"].unbind(-3)
            return a["q"], k, v
        return a["q"], a["k"], a["v"]

    def grads(self, result):
        if self.inputs == ("qkv",):
            return result[0].unbind(-3)
        if self.inputs == ("q", "kv"):
            dk, dv = result[1].unbind(-3)
            return result[0], dk, dv
        return result[0], result[1], result[2]


_FA2 = ("dropout_p", "window_size", "softcap", "alibi_slopes", "block_table")
_FA3 = (
    "window_size",
    "softcap",
    "attention_chunk",
    "q_descale",
    "k_descale",
    "v_descale",
    "seqused_q",
    "seqused_k",
    "page_table",
    "sink",
)
_FA4 = (
    "softcap",
    "window_size",
    "score_mod",
    "mask_mod",
    "learnable_sink",
    "block_sparse_tensors",
    "page_table",
    "seqused_q",
    "seqused_k",
    "gather_kv_indices",
)

# module → its autograd functions, and the plain functions counted as unchecked.
FLAVOURS = {
    "flash_attn.flash_attn_interface": (
        [  # FlashAttention 2 (package flash-attn)
            Flavour("FlashAttnFunc", "flash_attn_func", "fa2", 3, unmodelled=_FA2),
            Flavour("FlashAttnVarlenFunc", "flash_attn_varlen_func", "fa2", 3, (5, 6), unmodelled=_FA2),
            Flavour("FlashAttnQKVPackedFunc", "flash_attn_qkvpacked_func", "fa2", 3, inputs=("qkv",), unmodelled=_FA2),
            Flavour(
                "FlashAttnVarlenQKVPackedFunc",
                "flash_attn_varlen_qkvpacked_func",
                "fa2",
                3,
                (5, 6),
                inputs=("qkv",),
                unmodelled=_FA2,
            ),
            Flavour("FlashAttnKVPackedFunc", "flash_attn_kvpacked_func", "fa2", 3, inputs=("q", "kv"), unmodelled=_FA2),
            Flavour(
                "FlashAttnVarlenKVPackedFunc",
                "flash_attn_varlen_kvpacked_func",
                "fa2",
                3,
                (5, 6),
                inputs=("q", "kv"),
                unmodelled=_FA2,
            ),
        ],
        ("flash_attn_with_kvcache",),
    ),
    "flash_attn_interface": (
        [  # FlashAttention 3 (hopper/, module flash_attn_interface)
            Flavour("FlashAttnFunc", "flash_attn_func", "fa3", 3, unmodelled=_FA3),
            Flavour("FlashAttnVarlenFunc", "flash_attn_varlen_func", "fa3", 3, (5, 6), unmodelled=_FA3),
            Flavour("FlashAttnQKVPackedFunc", "flash_attn_qkvpacked_func", "fa3", 3, inputs=("qkv",), unmodelled=_FA3),
        ],
        ("flash_attn_with_kvcache",),
    ),
    "flash_attn.cute.interface": (
        [  # FlashAttention 4 (package flash-attn-4)
            Flavour("FlashAttnFunc", "flash_attn_func", "fa4", 4, unmodelled=_FA4),
            Flavour("FlashAttnVarlenFunc", "flash_attn_varlen_func", "fa4", 4, (11, 12), unmodelled=_FA4),
        ],
        (),
    ),
}

_NAMES = {"fa2": "FlashAttention 2", "fa3": "FlashAttention 3", "fa4": "FlashAttention-4"}


def _used(torch, value):
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(x is not None and x != -1 for x in value)
    return not (value is None or value is False or value == 0)


def _note(torch, flavour, arguments):
    used = [name for name in flavour.unmodelled if name in arguments and _used(torch, arguments[name])]
    if not used:
        return ""
    return f"the call used {', '.join(used)}, which replay does not model: replayed as plain attention"


class _Wrapper:
    def __init__(self, torch, say, count_unprobed, cls, flavour):
        self.torch, self.say, self.count_unprobed, self.flavour = torch, say, count_unprobed, flavour
        self.ops = torch.ops.nanprov
        self.forward, self.backward = cls.forward, cls.backward
        self.signature = inspect.signature(cls.forward)
        self.failed = False

    def _fail(self, e):
        if not self.failed:
            self.failed = True
            self.say(
                f"{_NAMES[self.flavour.backend]} probe failed, its calls are not recorded: {type(e).__name__}: {e}"
            )

    def wrapped_forward(self, ctx, *args, **kwargs):
        torch, f = self.torch, self.flavour
        if torch.compiler.is_compiling():
            return self.forward(ctx, *args, **kwargs)
        try:
            bound = self.signature.bind(ctx, *args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            q, k, v = f.qkv(a)
            if a.get("qv") is not None or not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or k is v:
                self.count_unprobed(f"{f.op} ({f.backend}, multi-latent attention)")
                return self.forward(ctx, *args, **kwargs)
            layout = "thd" if f.saved_cu and a.get("cu_seqlens_q") is not None else "bshd"
            scale = a.get("softmax_scale")
            plan = (
                None if scale is None else float(scale),
                bool(a.get("causal")),
                layout,
                a.get("cu_seqlens_q") if layout == "thd" else None,
                a.get("cu_seqlens_k") if layout == "thd" else None,
            )
            note = _note(torch, f, a)
        except Exception as e:
            self._fail(e)
            return self.forward(ctx, *args, **kwargs)

        def record(result):
            out = result[0] if isinstance(result, tuple) else result
            self.ops.record_call(q.detach(), k.detach(), v.detach(), out.detach(), None, *plan, f.op, f.backend, note)
            ctx._nanprov_plan = plan[:3]  # scale, causal, layout; cu_seqlens come back from saved_tensors

        return run_bracketed(
            self.ops,
            lambda: self.ops.begin_call(q.detach(), None),
            lambda: self.forward(ctx, *args, **kwargs),
            record,
            self._fail,
        )

    def wrapped_backward(self, ctx, dout, *rest):
        plan, f = getattr(ctx, "_nanprov_plan", None), self.flavour
        if plan is None or dout is None or self.torch.compiler.is_compiling():
            return self.backward(ctx, dout, *rest)
        try:
            saved = ctx.saved_tensors
            q, k, v, out = saved[0], saved[1], saved[2], saved[f.saved_out]
            if out.shape[-1] > dout.shape[-1]:  # FlashAttention 2 saves head_dim padded to a multiple of 8
                q, k, v, out = (t[..., : dout.shape[-1]] for t in (q, k, v, out))
            cu = (saved[f.saved_cu[0]], saved[f.saved_cu[1]]) if plan[2] == "thd" else (None, None)
        except Exception as e:
            self._fail(e)
            return self.backward(ctx, dout, *rest)

        def record(grads):
            dq, dk, dv = f.grads(grads)
            self.ops.record_backward(q, k, v, out, dout, dq, dk, dv, *plan, *cu, f.op, f.backend)

        return run_bracketed(
            self.ops, lambda: self.ops.begin_call(q, out), lambda: self.backward(ctx, dout, *rest), record, self._fail
        )


def _count_instead(function, what, count_unprobed):
    def counted(*args, **kwargs):
        count_unprobed(what)
        return function(*args, **kwargs)

    counted.__wrapped__ = function
    return counted


def _install(torch, say, count_unprobed, interface, classes, unchecked):
    for flavour in classes:
        cls = getattr(interface, flavour.cls, None)
        if cls is None or not hasattr(cls, "forward"):
            continue
        wrapper = _Wrapper(torch, say, count_unprobed, cls, flavour)
        cls.forward = staticmethod(wrapper.wrapped_forward)
        cls.backward = staticmethod(wrapper.wrapped_backward)
    backend = classes[0].backend
    for name in unchecked:
        function = getattr(interface, name, None)
        if callable(function):
            setattr(interface, name, _count_instead(function, f"{name} ({backend}, a kv-cache read)", count_unprobed))


def watch(watcher, torch, say, count_unprobed):
    """count_unprobed(what): counts one call nanprov recognised but could not check."""
    for module, (classes, unchecked) in FLAVOURS.items():

        def installed(interface, classes=classes, unchecked=unchecked):
            try:
                _install(torch, say, count_unprobed, interface, classes, unchecked)
            except Exception as e:
                say(f"{_NAMES[classes[0].backend]} is not probed ({type(e).__name__}: {e}); training continues")

        watcher.watch(module, installed)
