"""FlexAttention run eagerly (no torch.compile around it; inside compiled graphs see compiled_flex).

FlexAttention runs as higher-order ops, which the dispatcher cannot wrap: the bootstrap wraps
their __call__ instead. The forward (FlexAttentionHOP) is bracketed by begin_call and record_call,
with the bias its score_mod and block mask applied, materialised for replay when it fits; the
backward (FlexAttentionBackwardHOP, run by autograd on CUDA) by begin_call(q, out) and
record_backward, linked to its forward by O. The ops re-enter themselves while they dispatch:
only the outermost call is recorded. Nothing here changes what the ops return.
"""

import threading

# The most bytes a FlexAttention call's materialised bias may take; above, the capture says why
# it has none.
_BIAS_BYTES = 256 << 20


def _bias(torch, query, key, score_mod, block_mask, score_buffers, mask_buffers):
    """The additive bias a FlexAttention call applied, as one [B, H, Sq, Skv] float32 tensor, and
    an empty note; or None and why not. score_mod(0, ...) is the bias when score_mod adds to the
    score (checked on random scores); the block mask's mask_mod adds -inf where it hides."""
    b, h, sq, skv = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    if b * h * sq * skv * 4 > _BIAS_BYTES:
        return None, f"the bias of {b}x{h}x{sq}x{skv} is over {_BIAS_BYTES >> 20} MiB"
    dev = query.device
    idx = (
        torch.arange(b, device=dev).view(b, 1, 1, 1),
        torch.arange(h, device=dev).view(1, h, 1, 1),
        torch.arange(sq, device=dev).view(1, 1, sq, 1),
        torch.arange(skv, device=dev).view(1, 1, 1, skv),
    )
    with torch.no_grad():
        zero = torch.zeros(b, h, sq, skv, device=dev, dtype=torch.float32)
        bias = score_mod(zero, *idx, *score_buffers).float().expand(b, h, sq, skv)
        # A generator of our own: drawing from the global one would shift the training's dropout.
        gen = torch.Generator(device=dev).manual_seed(0)
        probe = torch.randn(zero.shape, generator=gen, device=dev)
        moved = score_mod(probe, *idx, *score_buffers).float()
        same = torch.isclose(moved, probe + bias, rtol=1e-5, atol=1e-5, equal_nan=True)
        if not bool(same.all()):
            return None, "score_mod does not add to the score (soft-capping, scaling): no bias stands for it"
        mask_mod = block_mask[-1] if isinstance(block_mask, tuple) and block_mask else None
        if callable(mask_mod):
            allow = mask_mod(*idx, *mask_buffers).expand(b, h, sq, skv)
            bias = bias.masked_fill(~allow.bool(), float("-inf"))
    return bias.contiguous(), ""


class _Wrapped:
    """One higher-order op's __call__, bracketed for its outermost real (not traced) calls."""

    def __init__(self, torch, say, what):
        self.torch, self.say, self.what = torch, say, what
        self.ops = torch.ops.nanprov
        self.fake = __import__("torch._subclasses.fake_tensor", fromlist=["is_fake"])
        self.depth = threading.local()
        self.warned = False

    def probed(self, query):
        torch = self.torch
        return (
            not getattr(self.depth, "n", 0)
            and not torch.compiler.is_compiling()
            and isinstance(query, torch.Tensor)
            and not self.fake.is_fake(query)
        )

    def fail(self, e):
        if not self.warned:
            self.warned = True
            self.say(f"{self.what} probe failed, this call is not recorded: {type(e).__name__}: {e}")

    def run(self, original, args, kwargs):
        """Runs the op inside the bracket begin_call already opened; closes it if the op raised."""
        self.depth.n = getattr(self.depth, "n", 0) + 1
        try:
            return original(*args, **kwargs)
        except BaseException:
            self.ops.abandon_call()
            raise
        finally:
            self.depth.n -= 1


def _wrap_forward(torch, say, cls):
    w = _Wrapped(torch, say, "FlexAttention")
    original = cls.__call__

    def __call__(self, query, key, value, score_mod, block_mask, scale, *args, **kwargs):
        call = (self, query, key, value, score_mod, block_mask, scale) + args
        if not w.probed(query):
            return original(*call, **kwargs)
        try:
            # After kernel_options: score_mod_other_buffers, mask_mod_other_buffers. Made before the
            # bracket, so its kernels are not the call's.
            score_buffers = args[1] if len(args) > 1 else kwargs.get("score_mod_other_buffers", ())
            mask_buffers = args[2] if len(args) > 2 else kwargs.get("mask_mod_other_buffers", ())
            try:
                bias, note = _bias(torch, query, key, score_mod, block_mask, tuple(score_buffers), tuple(mask_buffers))
            except Exception as e:  # the call is still checked; only its replay lacks the bias
                bias, note = None, f"materialising the bias failed: {type(e).__name__}: {e}"
            backend = kernel_backend(args[0] if args else kwargs.get("kernel_options"))
            w.ops.begin_call(query.detach(), None)
        except Exception as e:
            w.fail(e)
            return original(*call, **kwargs)
        result = w.run(original, call, kwargs)
        try:
            out = result[0] if isinstance(result, tuple) else result
            w.ops.record_call(
                query.detach(),
                key.detach(),
                value.detach(),
                out.detach(),
                bias,
                None if scale is None else float(scale),
                False,
                "bhsd",
                None,
                None,
                "flex_attention",
                "flex",
                note,
                kernel_backend=backend,
            )
        except Exception as e:  # never let the probe reach the training
            w.ops.abandon_call()
            w.fail(e)
        return result

    cls.__call__ = __call__


def kernel_backend(options):
    """FlexAttention's kernel_options["BACKEND"] ("TRITON", "FLASH"...): which kernel ran the call."""
    return str(options.get("BACKEND", "")) if isinstance(options, dict) else ""


def _wrap_backward(torch, say, cls):
    w = _Wrapped(torch, say, "FlexAttention backward")
    original = cls.__call__

    # (query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph, block_mask,
    #  scale, ...) -> (grad_query, grad_key, grad_value, grad_score_mod_captured)
    def __call__(self, query, key, value, out, logsumexp, grad_out, *args, **kwargs):
        call = (self, query, key, value, out, logsumexp, grad_out) + args
        if not w.probed(query) or not isinstance(grad_out, torch.Tensor):
            return original(*call, **kwargs)
        try:
            scale = args[4] if len(args) > 4 else kwargs.get("scale")
            backend = kernel_backend(args[5] if len(args) > 5 else kwargs.get("kernel_options"))
            w.ops.begin_call(query.detach(), out.detach())
        except Exception as e:
            w.fail(e)
            return original(*call, **kwargs)
        result = w.run(original, call, kwargs)
        try:
            dq, dk, dv = (g.detach() if isinstance(g, torch.Tensor) else None for g in result[:3])
            w.ops.record_backward(
                query.detach(),
                key.detach(),
                value.detach(),
                out.detach(),
                grad_out.detach(),
                dq,
                dk,
                dv,
                None if scale is None else float(scale),
                False,
                "bhsd",
                None,
                None,
                "flex_attention",
                "flex",
                kernel_backend=backend,
            )
        except Exception as e:
            w.ops.abandon_call()
            w.fail(e)
        return result

    cls.__call__ = __call__


def install(torch, say):
    try:
        hops = __import__("torch._higher_order_ops.flex_attention", fromlist=["FlexAttentionHOP"])
        _ = torch.ops.nanprov.begin_call  # the probes' ops are there (raises where they are not)
    except Exception:
        return
    _wrap_forward(torch, say, hops.FlexAttentionHOP)
    if hasattr(hops, "FlexAttentionBackwardHOP"):
        _wrap_backward(torch, say, hops.FlexAttentionBackwardHOP)
