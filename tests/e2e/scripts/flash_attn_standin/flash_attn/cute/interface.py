"""A stand-in for flash-attn-4's `flash_attn.cute.interface`, for nanprov's CPU tests: FA4 runs only
on Hopper and Blackwell GPUs (the GPU tests run the real one). It keeps what nanprov's bootstrap
relies on: two torch.autograd.Functions, FlashAttnFunc and FlashAttnVarlenFunc, with FA4's argument
order, its (B, S, H, D) and packed (total, H, D) layouts, and the order of its saved tensors
(q, k, v, qv, out, lse, ...; the varlen one then cu_seqlens_q and cu_seqlens_k at 11 and 12).
Attention itself is plain PyTorch (standin_attention.py), so nothing here is under test.
"""
import torch
import torch.nn.functional as F


from standin_attention import attention_backward as _backward, attention_forward as _forward


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False,
                window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1, pack_gqa=None,
                deterministic=False, score_mod=None, score_mod_bwd=None, mask_mod=None, aux_tensors=None,
                aux_scalars=None, block_sparse_tensors=None, block_sparse_tensors_bwd=None, return_lse=False,
                gather_bwd_recompute_p=False, gather_bwd_token_chunk=None):
        out, lse = _forward(q, k, v, softmax_scale, causal)
        ctx.save_for_backward(q, k, v, qv, out, lse, None, None, None, None, None)
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, _qv, _out, *_ = ctx.saved_tensors
        dq, dk, dv = _backward(ctx, dout, q, k, v)
        return (dq, dk, dv) + (None,) * 20


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, qv=None, cu_seqlens_q=None, cu_seqlens_k=None, seqused_q=None, seqused_k=None,
                max_seqlen_q=None, max_seqlen_k=None, min_seqlen_k=None, gather_kv_indices=None, page_table=None,
                softmax_scale=None, causal=False, window_size=(None, None), learnable_sink=None, softcap=0.0,
                num_splits=1, pack_gqa=None, deterministic=False, score_mod=None, score_mod_bwd=None, mask_mod=None,
                block_sparse_tensors=None, aux_tensors=None, aux_scalars=None, return_lse=False,
                scheduler_metadata=None, seqlen_k_per_split=None, disable_scheduler_metadata=False,
                gather_bwd_recompute_p=False, gather_bwd_token_chunk=None):
        out, lse = _forward(q, k, v, softmax_scale, causal, cu_seqlens_q, cu_seqlens_k)
        ctx.save_for_backward(q, k, v, qv, out, lse, None, None, None, None, None, cu_seqlens_q, cu_seqlens_k,
                              seqused_q, seqused_k)
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, _qv, _out, *rest = ctx.saved_tensors
        dq, dk, dv = _backward(ctx, dout, q, k, v, rest[6], rest[7])
        return (dq, dk, dv) + (None,) * 40


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, **kwargs):
    return FlashAttnFunc.apply(q, k, v, None, None, softmax_scale, causal)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           softmax_scale=None, causal=False, **kwargs):
    return FlashAttnVarlenFunc.apply(q, k, v, None, cu_seqlens_q, cu_seqlens_k, None, None, max_seqlen_q,
                                     max_seqlen_k, None, None, None, softmax_scale, causal)
