"""Attention computed in plain ops, with a plain softmax, by code nanprov knows the calling convention
of. Both are bracketed like FA4 and module probes (torch.ops.nanprov.begin_call / record_call, the
backward from tensor hooks) with backend `plain_softmax`, which replay reruns as such:

- `nn.MultiheadAttention` with `need_weights=True` (its default) and direct calls of
  `F.multi_head_attention_forward`: the function runs softmax(q kᵀ + mask) v in bmm/baddbmm ops, not
  SDPA, so a query row whose keys are all masked is NaN (pytorch#41508). Q, K and V are the
  in-projection's outputs and O the input of the out-projection, both read where the function
  produces them (its `_in_projection*` helpers, and `linear` swapped for the call's duration on
  this thread only); the mask is attn_mask and key_padding_mask merged as the function merges them.
  With `need_weights=False` the function calls SDPA, which is probed as SDPA.
- Hugging Face's `eager` attention (each model's `eager_attention_forward`, which HF's
  `AttentionInterface.get_interface` hands back as the default): Q, K, V as the function receives
  them (K and V before repeat_kv: GQA), its additive mask, O as its output transposed to
  (B, H, S, D). HF's other implementations run SDPA, FlexAttention or FlashAttention underneath,
  which are probed there: one attention call is recorded once.

Everything here only reads: each wrapper returns exactly what the wrapped function returned.
"""

import inspect
import threading

from .bracket import run_bracketed

# Arguments of F.multi_head_attention_forward that change K and V after the projection in ways
# the capture does not carry: such calls are counted as unchecked.
_MHA_UNMODELLED = ("bias_k", "bias_v", "static_k", "static_v")
# Keyword arguments of HF eager functions that replay does not model (Gemma2's logit softcapping,
# gpt-oss's attention sinks): the call is checked, its capture says replay cannot judge it.
_HF_UNMODELLED = ("softcap", "s_aux", "sinks")


def _additive(torch, mask, dtype):
    """A mask as the score term it adds: a bool mask hides where True (MHA's convention)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    return mask.to(dtype)


class _Failures:
    def __init__(self, say, what):
        self.say, self.what, self.said = say, what, False

    def __call__(self, e):
        if not self.said:
            self.said = True
            self.say(f"{self.what} probe failed, its calls are not recorded: {type(e).__name__}: {e}")


def install_mha(torch, say, count_unprobed):
    from . import module_probes

    F = torch.nn.functional
    ops = torch.ops.nanprov
    original = F.multi_head_attention_forward
    signature = inspect.signature(original)
    linear = F.linear
    here = threading.local()  # active on this thread while a probed call runs
    swapped = [0]  # calls running with `linear` swapped, over all threads
    fail = _Failures(say, "nn.MultiheadAttention")

    def keep_projection(helper):
        def projected(*args, **kwargs):
            result = helper(*args, **kwargs)
            if getattr(here, "active", False):
                here.projected = result
            return result

        return projected

    def reading_linear(input, weight, bias=None):
        if getattr(here, "active", False):
            here.linear_input = input  # the last one in the call is the out-projection's
        return linear(input, weight, bias)

    F._in_projection_packed = keep_projection(F._in_projection_packed)
    F._in_projection = keep_projection(F._in_projection)

    def record(a):
        q, k, v = here.projected
        o = here.linear_input
        heads = a["num_heads"]
        length, batch, embed = q.shape
        source = k.shape[0]
        head_dim = embed // heads

        def view(t, role):
            rows = length if role in ("Q", "O") else source
            return t.reshape(rows, batch, heads, head_dim).permute(1, 2, 0, 3)

        mask = _additive(torch, a["attn_mask"], q.dtype)
        if mask is not None:
            mask = mask.view(1, 1, length, source) if mask.dim() == 2 else mask.view(batch, heads, length, source)
        padding = _additive(torch, a["key_padding_mask"], q.dtype)
        if padding is not None:
            padding = padding.reshape(batch, 1, 1, source)
            mask = padding if mask is None else mask + padding
        mask = None if mask is None else mask.detach()
        op = "multi_head_attention_forward"
        # MHA applies its dropout only in training (known issues need dropout on, or off).
        dropout = float(a["dropout_p"]) if a["training"] else 0.0
        ops.record_call(
            view(q.detach(), "Q"),
            view(k.detach(), "K"),
            view(v.detach(), "V"),
            view(o.detach(), "O"),
            None,
            None,
            False,
            "bhsd",
            None,
            None,
            op,
            "plain_softmax",
            "",
            mask,
            dropout_p=dropout,
        )
        if torch.is_grad_enabled() and o.requires_grad:
            module_probes.watch_backward(ops, op, q, k, v, o, "plain_softmax", None, mask, view)

    def call_reading_projections(args, kwargs):
        here.active, here.projected, here.linear_input = True, None, None
        if swapped[0] == 0:
            F.linear = reading_linear
        swapped[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            here.active = False
            swapped[0] -= 1
            if swapped[0] == 0:
                F.linear = linear

    def record_seen(a):
        try:
            if here.projected is None or here.linear_input is None:
                raise RuntimeError("the projections were not seen (a torch whose MHA differs)")
            record(a)
        finally:
            here.projected = here.linear_input = None

    def multi_head_attention_forward(*args, **kwargs):
        if torch.compiler.is_compiling() or getattr(here, "active", False):
            return original(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            if not a["need_weights"]:
                return original(*args, **kwargs)  # runs SDPA, probed as SDPA
            if any(a[name] is not None for name in _MHA_UNMODELLED) or a["add_zero_attn"]:
                count_unprobed("nn.MultiheadAttention with need_weights=True and bias_k, add_zero_attn or static keys")
                return original(*args, **kwargs)
        except Exception as e:
            fail(e)
            return original(*args, **kwargs)
        return run_bracketed(
            ops,
            lambda: ops.begin_call(a["query"].detach(), None),
            lambda: call_reading_projections(args, kwargs),
            lambda result: record_seen(a),
            fail,
        )

    multi_head_attention_forward.__wrapped__ = original
    F.multi_head_attention_forward = multi_head_attention_forward


def install_hf_eager(torch, say, modeling_utils):
    from . import module_probes

    ops = torch.ops.nanprov
    interface = modeling_utils.AttentionInterface
    original_get = interface.get_interface
    wrapped = {}  # each model's eager function -> its probe
    fail = _Failures(say, "Hugging Face eager attention")

    def probe(eager):
        def eager_attention(module, query, key, value, attention_mask, *args, **kwargs):
            def call():
                return eager(module, query, key, value, attention_mask, *args, **kwargs)

            if torch.compiler.is_compiling():
                return call()

            def record(result):
                out = result[0] if isinstance(result, tuple) else result
                mask = attention_mask
                if mask is not None:
                    mask = _additive(torch, mask[..., : key.shape[-2]], query.dtype).detach()
                used = [name for name in _HF_UNMODELLED if kwargs.get(name) is not None]
                note = f"the call used {', '.join(used)}, which replay does not model" if used else ""
                scaling = kwargs.get("scaling", args[0] if args else None)
                scale = None if scaling is None else float(scaling)
                # Hugging Face's eager attention drops weights only while its module trains.
                dropout = kwargs.get("dropout", args[1] if len(args) > 1 else 0.0)
                dropout = float(dropout or 0.0) if getattr(module, "training", False) else 0.0
                op = "eager_attention_forward"
                ops.record_call(
                    query.detach(),
                    key.detach(),
                    value.detach(),
                    out.detach().transpose(1, 2),
                    None,
                    scale,
                    False,
                    "bhsd",
                    None,
                    None,
                    op,
                    "plain_softmax",
                    note,
                    mask,
                    dropout_p=dropout,
                )
                if torch.is_grad_enabled() and out.requires_grad:
                    module_probes.watch_backward(
                        ops,
                        op,
                        query,
                        key,
                        value,
                        out,
                        "plain_softmax",
                        scale,
                        mask,
                        lambda t, role: t.transpose(1, 2) if role == "O" else t,
                    )

            return run_bracketed(ops, lambda: ops.begin_call(query.detach(), None), call, record, fail)

        eager_attention.__wrapped__ = eager
        return eager_attention

    def get_interface(self, attn_implementation, default):
        found = original_get(self, attn_implementation, default)
        if found is not default or default is None:
            return found  # sdpa, flex and flash implementations are probed underneath
        try:
            if default not in wrapped:
                wrapped[default] = probe(default)
            return wrapped[default]
        except Exception as e:  # an unhashable default: left as it is
            fail(e)
            return found

    interface.get_interface = get_interface
