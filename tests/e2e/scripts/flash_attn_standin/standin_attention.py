"""Plain PyTorch attention shared by the FlashAttention stand-ins (FA2: flash_attn/flash_attn_interface.py,
FA3: flash_attn_interface.py, FA4: flash_attn/cute/interface.py): bottom-right causal, as FlashAttention
aligns it, (S, H, D) sequences in the (B, S, H, D) or packed (total, H, D) layouts. Nothing here is under
test: nanprov's wrappers are, around the stand-ins' call signatures and saved-tensor layouts.

STANDIN_FAULT=nan-row makes the stand-in a faulty kernel: the first query row of each call's output
is NaN, whatever the inputs (what a kernel bug looks like to nanprov; replay cannot rerun the
stand-in, every backend it can run gets the call right).
"""
import os

import torch


def _attend(q, k, v, scale, causal):
    """(S, H, D) sequences → (S, H, D) output and (H, S) log-sum-exp, in float32."""
    qh, kh, vh = (t.transpose(0, 1).float() for t in (q, k, v))
    if kh.shape[0] != qh.shape[0]:  # GQA
        kh = kh.repeat_interleave(qh.shape[0] // kh.shape[0], 0)
        vh = vh.repeat_interleave(qh.shape[0] // vh.shape[0], 0)
    scores = qh @ kh.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        sq, sk = scores.shape[-2:]
        allow = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        scores = scores.masked_fill(~allow, float("-inf"))
    lse = scores.logsumexp(-1)
    return (scores.softmax(-1) @ vh).transpose(0, 1).to(q.dtype), lse


def _sequences(x, cu):
    return [x[a:b] for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())] if cu is not None else list(x)


def attention_forward(q, k, v, scale, causal, cu_q=None, cu_k=None):
    outs, lses = zip(*(_attend(a, b, c, scale, causal) for a, b, c in
                       zip(_sequences(q, cu_q), _sequences(k, cu_k), _sequences(v, cu_k))))
    if os.environ.get("STANDIN_FAULT") == "nan-row":
        outs = (outs[0].index_fill(0, torch.tensor([0], device=q.device), float("nan")),) + outs[1:]
    if cu_q is not None:
        return torch.cat(outs), torch.cat(lses, dim=-1)
    return torch.stack(outs), torch.stack(lses)


def attention_backward(ctx, dout, q, k, v, cu_q=None, cu_k=None):
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out, _ = attention_forward(*leaves, ctx.softmax_scale, ctx.causal, cu_q, cu_k)
        return torch.autograd.grad(out, leaves, dout)
