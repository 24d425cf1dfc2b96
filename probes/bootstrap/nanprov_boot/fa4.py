"""FlashAttention-4 (`flash_attn.cute`): its CuTe DSL kernels run inside two torch.autograd.Functions,
FlashAttnFunc ((B, S, H, D) tensors) and FlashAttnVarlenFunc (packed (total, H, D) tensors with
cu_seqlens), not ATen ops.

When `flash_attn.cute.interface` is imported, the forward and backward of both are wrapped:
begin_call before (the call is named and its kernels are traced from there), record_call or
record_backward after, with the layout ("bshd" or "thd"), causal flag, scale and cu_seqlens that
replay needs. The wrappers return exactly what FA4 returned. Saved for the backward on `ctx` are
plain values only: a tensor there would tie the graph into a reference cycle.

Features replay does not model (softcap, a sliding window, score_mod / mask_mod, learnable sinks,
block sparsity, paged KV, seqused) are named in the capture's note; the call is still checked.
Multi-latent attention (qv, or k is v at head_dim 512) is checked by no one: counted as unprobed.
"""
import inspect

_UNMODELLED = ("softcap", "window_size", "score_mod", "mask_mod", "learnable_sink", "block_sparse_tensors",
               "page_table", "seqused_q", "seqused_k", "gather_kv_indices")


def _note(arguments):
    used = []
    for name in _UNMODELLED:
        value = arguments.get(name)
        if name == "softcap" and not value:
            continue
        if name == "window_size" and (value is None or tuple(value) == (None, None)):
            continue
        if name not in ("softcap", "window_size") and value is None:
            continue
        used.append(name)
    if not used:
        return ""
    return f"the call used {', '.join(used)}, which replay does not model: replayed as plain attention"


class _Wrapper:
    def __init__(self, torch, say, count_unprobed, cls, op, varlen):
        self.torch, self.say, self.count_unprobed, self.op, self.varlen = torch, say, count_unprobed, op, varlen
        self.ops = torch.ops.nanprov
        self.forward, self.backward = cls.forward, cls.backward
        self.signature = inspect.signature(cls.forward)
        self.failed = False

    def _fail(self, e):
        if not self.failed:
            self.failed = True
            self.say(f"FlashAttention-4 probe failed, its calls are not recorded: {type(e).__name__}: {e}")

    def wrapped_forward(self, ctx, *args, **kwargs):
        torch = self.torch
        if torch.compiler.is_compiling():
            return self.forward(ctx, *args, **kwargs)
        try:
            bound = self.signature.bind(ctx, *args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            q, k, v = a["q"], a["k"], a["v"]
            if a.get("qv") is not None or not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or k is v:
                self.count_unprobed(self.op)
                return self.forward(ctx, *args, **kwargs)
            layout = "thd" if self.varlen and a.get("cu_seqlens_q") is not None else "bshd"
            scale = a.get("softmax_scale")
            plan = (None if scale is None else float(scale), bool(a.get("causal")), layout,
                    a.get("cu_seqlens_q") if layout == "thd" else None, a.get("cu_seqlens_k") if layout == "thd" else None)
            note = _note(a)
            self.ops.begin_call(q.detach(), None)
        except Exception as e:
            self._fail(e)
            return self.forward(ctx, *args, **kwargs)
        try:
            result = self.forward(ctx, *args, **kwargs)
        except BaseException:
            self.ops.abandon_call()
            raise
        try:
            out = result[0] if isinstance(result, tuple) else result
            self.ops.record_call(q.detach(), k.detach(), v.detach(), out.detach(), None, *plan, self.op, "fa4", note)
            ctx._nanprov_plan = plan[:3]  # scale, causal, layout; cu_seqlens come back from saved_tensors
        except Exception as e:
            self.ops.abandon_call()
            self._fail(e)
        return result

    def wrapped_backward(self, ctx, dout, *rest):
        plan = getattr(ctx, "_nanprov_plan", None)
        if plan is None or dout is None or self.torch.compiler.is_compiling():
            return self.backward(ctx, dout, *rest)
        try:
            # FA4 saves (q, k, v, qv, out, lse, ...), the varlen function then (..., cu_seqlens_q, cu_seqlens_k, ...).
            saved = ctx.saved_tensors
            q, k, v, out = saved[0], saved[1], saved[2], saved[4]
            cu = (saved[11], saved[12]) if plan[2] == "thd" else (None, None)
            self.ops.begin_call(q, out)
        except Exception as e:
            self._fail(e)
            return self.backward(ctx, dout, *rest)
        try:
            grads = self.backward(ctx, dout, *rest)
        except BaseException:
            self.ops.abandon_call()
            raise
        try:
            self.ops.record_backward(q, k, v, out, dout, grads[0], grads[1], grads[2], *plan, *cu, self.op, "fa4")
        except Exception as e:
            self.ops.abandon_call()
            self._fail(e)
        return grads


def _install(torch, say, count_unprobed, interface):
    for cls_name, op, varlen in (("FlashAttnFunc", "flash_attn_func", False),
                                 ("FlashAttnVarlenFunc", "flash_attn_varlen_func", True)):
        cls = getattr(interface, cls_name, None)
        if cls is None:
            continue
        wrapper = _Wrapper(torch, say, count_unprobed, cls, op, varlen)
        cls.forward = staticmethod(wrapper.wrapped_forward)
        cls.backward = staticmethod(wrapper.wrapped_backward)


def watch(watcher, torch, say, count_unprobed):
    """count_unprobed(what): counts one call nanprov recognised but could not check."""
    def installed(interface):
        try:
            _install(torch, say, count_unprobed, interface)
        except Exception as e:
            say(f"FlashAttention-4 is not probed ({type(e).__name__}: {e}); training continues")

    watcher.watch("flash_attn.cute.interface", installed)
