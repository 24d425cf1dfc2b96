"""A stand-in for FlashAttention 3's `flash_attn_interface` (its hopper/ build), for nanprov's CPU tests
(FA3 runs on Hopper GPUs only). It keeps what nanprov's bootstrap relies on: the autograd functions
FlashAttnFunc and FlashAttnVarlenFunc with FA3's argument order, layouts and saved tensors (q, k, v,
out, softmax_lse; the varlen one then cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k).
"""
import torch

from standin_attention import attention_backward, attention_forward


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, qv=None, q_descale=None, k_descale=None, v_descale=None,
                window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False,
                sm_margin=0, return_softmax=False):
        out, lse = attention_forward(q, k, v, softmax_scale, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        return (out, lse) if return_softmax else out

    @staticmethod
    def backward(ctx, dout, *args):
        q, k, v, _out, _lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(ctx, dout, q, k, v)
        return (dq, dk, dv) + (None,) * 14


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q, max_seqlen_k,
                softmax_scale, causal, qv=None, q_descale=None, k_descale=None, v_descale=None, window_size=(-1, -1),
                attention_chunk=0, softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                return_softmax=False):
        out, lse = attention_forward(q, k, v, softmax_scale, causal, cu_seqlens_q, cu_seqlens_k)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        return (out, lse) if return_softmax else out

    @staticmethod
    def backward(ctx, dout, *args):
        q, k, v, _out, _lse, cu_q, cu_k, *_ = ctx.saved_tensors
        dq, dk, dv = attention_backward(ctx, dout, q, k, v, cu_q, cu_k)
        return (dq, dk, dv) + (None,) * 20


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1, pack_gqa=None,
                    deterministic=False, sm_margin=0, return_attn_probs=False):
    return FlashAttnFunc.apply(q, k, v, softmax_scale, causal, qv, q_descale, k_descale, v_descale, window_size,
                               attention_chunk, softcap, num_splits, pack_gqa, deterministic, sm_margin,
                               return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, **kwargs):
    return FlashAttnVarlenFunc.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q,
                                     max_seqlen_k, softmax_scale, causal)


def flash_attn_with_kvcache(*args, **kwargs):
    """Present because Hugging Face imports it with the others; the stand-in serves no kv-cache."""
    raise NotImplementedError("the FlashAttention 3 stand-in has no kv-cache path")
