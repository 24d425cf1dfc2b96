"""A stand-in for FlashAttention 2's `flash_attn.flash_attn_interface`, for nanprov's CPU tests (FA2's
kernels need an NVIDIA GPU). It keeps what nanprov's bootstrap relies on: the autograd functions
FlashAttnFunc and FlashAttnVarlenFunc with FA2's argument order, its (B, S, H, D) and packed
(total, H, D) layouts and its saved tensors (q, k, v, out_padded, softmax_lse, rng_state; the varlen
one with cu_seqlens_q and cu_seqlens_k at 5 and 6), and the public functions' signatures.
"""
import torch

from standin_attention import attention_backward, attention_forward


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_softmax, is_grad_enabled):
        out, lse = attention_forward(q, k, v, softmax_scale, causal)
        ctx.save_for_backward(q, k, v, out, lse, torch.zeros(2, dtype=torch.int64))
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        return (out, lse, None) if return_softmax else out

    @staticmethod
    def backward(ctx, dout, *args):
        q, k, v, _out, _lse, _rng = ctx.saved_tensors
        dq, dk, dv = attention_backward(ctx, dout, q, k, v)
        return (dq, dk, dv) + (None,) * 9


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                window_size, softcap, alibi_slopes, deterministic, return_softmax, block_table, is_grad_enabled):
        out, lse = attention_forward(q, k, v, softmax_scale, causal, cu_seqlens_q, cu_seqlens_k)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, torch.zeros(2, dtype=torch.int64))
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        return (out, lse, None) if return_softmax else out

    @staticmethod
    def backward(ctx, dout, *args):
        q, k, v, _out, _lse, cu_q, cu_k, _rng = ctx.saved_tensors
        dq, dk, dv = attention_backward(ctx, dout, q, k, v, cu_q, cu_k)
        return (dq, dk, dv) + (None,) * 14


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    return FlashAttnFunc.apply(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                               deterministic, return_attn_probs, torch.is_grad_enabled())


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    return FlashAttnVarlenFunc.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                     softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                     return_attn_probs, block_table, torch.is_grad_enabled())
