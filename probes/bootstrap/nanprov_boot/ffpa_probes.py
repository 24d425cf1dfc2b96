"""FFPA (package ffpa-attn, 0.2.4): large-head-dim attention whose kernels (Triton by default, CuTe DSL
or CUDA on request) run inside one torch.autograd.Function, `ffpa_attn.functional._FFPAAttnFunc`, that
`ffpa_attn_func` ([B, H, N, D], SDPA's signature) reaches for head_dim above 256. When `ffpa_attn`
is imported, that function's forward and backward are wrapped as FlashAttention's are
(flash_attn_probes.py): begin_call before, record_call / record_backward after, with the scale,
causal flag and additive mask (the bias FFPA made of the user's attn_mask) replay needs, backend
`ffpa`, op `ffpa_attn_func`. The wrappers return exactly what the function returned.

Why the function and not its dispatcher ops (`ffpa_attn::_fwd_triton`, `_bwd_triton`, `_fwd_cute`,
`_bwd_cute`): the backward op is handed copies (`.contiguous()` of the saved Q, K, V and O, K and V
repeated per query head for some GQA shapes, the LSE re-padded with uninitialised rows), so it cannot
be linked to its forward by O's address when Q is a transposed view (every Hugging Face model), and
each kernel family has its own layout; the function sees the user's tensors for all of them.

Never counted twice: what FFPA hands to SDPA is checked by SDPA's own probes and not here, namely
the calls `ffpa_attn_func` sends straight to SDPA (head_dim up to 256, short sequences), the small
head_dims the function itself runs through ATen's flash forward, and a backward run with
`backward_backend='sdpa'` (ATen's efficient backward). Packed sequences (`ffpa_attn_varlen_func`,
CuTe DSL only) and the CUDA backend's no-grad fast path are counted as unchecked attention, so a
run with them is never called clean.
"""

from .bracket import run_bracketed

_O_SAVED = 3  # _FFPAAttnFunc saves (q, k, v, O, lse, rng_state, unused), each .contiguous()


class _Wrapper:
    def __init__(self, torch, say, functional, cls):
        self.torch, self.say, self.functional = torch, say, functional
        self.ops = torch.ops.nanprov
        self.forward, self.backward = cls.forward, cls.backward
        self.failed = False

    def _fail(self, e):
        if not self.failed:
            self.failed = True
            self.say(f"FFPA probe failed, its calls are not recorded: {type(e).__name__}: {e}")

    def _by_sdpa(self, meta, head_dim):
        small = getattr(self.functional, "_should_use_aten_small_d_forward", None)
        return small(meta.forward_meta, head_dim) if small else head_dim <= 256

    def wrapped_forward(self, ctx, q, k, v, attn_bias, meta):
        torch = self.torch
        if torch.compiler.is_compiling():
            return self.forward(ctx, q, k, v, attn_bias, meta)
        try:
            if self._by_sdpa(meta, q.shape[-1]):  # ATen's flash forward: probed as the SDPA op it is
                return self.forward(ctx, q, k, v, attn_bias, meta)
            a = meta.attn_meta
            scale, causal = float(a.scale) if a.scale else None, bool(a.is_causal)
            notes = []
            if a.dropout_p:
                notes.append(f"dropout p={a.dropout_p}")
            if causal and q.shape[-2] != k.shape[-2]:
                notes.append("a causal mask aligned bottom-right with Nq != Nkv")
            note = (
                f"the call used {', '.join(notes)}, which replay does not model: replayed as plain attention"
                if notes
                else ""
            )
            mask = attn_bias.detach() if attn_bias is not None else None
        except Exception as e:
            self._fail(e)
            return self.forward(ctx, q, k, v, attn_bias, meta)

        def record(out):
            # The backward finds its forward by the address of the O it was saved: a copy when O is
            # not contiguous (FFPA allocates it like Q, a transposed view in most models).
            saved = getattr(ctx, "to_save", None)
            link = saved[_O_SAVED] if saved and len(saved) > _O_SAVED else out
            self.ops.record_call(
                q.detach(),
                k.detach(),
                v.detach(),
                out.detach(),
                None,
                scale,
                causal,
                "bhsd",
                None,
                None,
                "ffpa_attn_func",
                "ffpa",
                note,
                mask,
                link.detach(),
            )
            ctx._nanprov_plan = (scale, causal)

        return run_bracketed(
            self.ops,
            lambda: self.ops.begin_call(q.detach(), None),
            lambda: self.forward(ctx, q, k, v, attn_bias, meta),
            record,
            self._fail,
        )

    def wrapped_backward(self, ctx, grad_out):
        plan = getattr(ctx, "_nanprov_plan", None)
        if plan is None or grad_out is None or self.torch.compiler.is_compiling():
            return self.backward(ctx, grad_out)
        try:
            if getattr(ctx.meta.backward_meta, "name", "") == "sdpa":  # ATen's efficient backward, probed there
                return self.backward(ctx, grad_out)
            saved = ctx.saved_tensors
            q, k, v, out = saved[0], saved[1], saved[2], saved[_O_SAVED]
            bias = getattr(ctx, "attn_bias", None)
            mask = bias.detach() if bias is not None else None
        except Exception as e:
            self._fail(e)
            return self.backward(ctx, grad_out)

        def record(grads):
            self.ops.record_backward(
                q,
                k,
                v,
                out,
                grad_out,
                grads[0],
                grads[1],
                grads[2],
                *plan,
                "bhsd",
                None,
                None,
                "ffpa_attn_func",
                "ffpa",
                mask,
            )

        return run_bracketed(
            self.ops, lambda: self.ops.begin_call(q, out), lambda: self.backward(ctx, grad_out), record, self._fail
        )


def _counted(function, what, count_unprobed, returned=lambda result: True):
    def counted(*args, **kwargs):
        result = function(*args, **kwargs)
        if returned(result):
            count_unprobed(what)
        return result

    counted.__wrapped__ = function
    return counted


def _install(torch, say, count_unprobed, interface):
    functional = __import__("ffpa_attn.functional", fromlist=["_FFPAAttnFunc"])
    cls = functional._FFPAAttnFunc
    wrapper = _Wrapper(torch, say, functional, cls)
    cls.forward = staticmethod(wrapper.wrapped_forward)
    cls.backward = staticmethod(wrapper.wrapped_backward)
    varlen = getattr(functional, "FFPAAttnVarlenFunc", None)
    if varlen is not None:
        varlen.apply = classmethod(
            _counted(varlen.apply.__func__, "ffpa_attn_varlen_func (ffpa, packed sequences)", count_unprobed)
        )
    fast = getattr(interface, "_ffpa_attn_forward", None)
    if callable(fast):  # the CUDA backend's no-grad fast path: None when it declined the call
        interface._ffpa_attn_forward = _counted(
            fast, "ffpa_attn_func (ffpa, CUDA backend fast path)", count_unprobed, lambda result: result is not None
        )


def watch(watcher, torch, say, count_unprobed):
    """count_unprobed(what): counts one call nanprov recognised but could not check."""

    def installed(interface):
        try:
            _install(torch, say, count_unprobed, interface)
        except Exception as e:
            say(f"FFPA is not probed ({type(e).__name__}: {e}); training continues")

    watcher.watch("ffpa_attn.ffpa_attn_interface", installed)
