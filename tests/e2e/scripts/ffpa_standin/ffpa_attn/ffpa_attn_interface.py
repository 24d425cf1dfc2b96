"""FFPA's public entry points (stand-in; see the package docstring)."""
from __future__ import annotations

import torch

from .functional import CUDABackend, FFPAAttnFunc, FFPAAttnMeta, FFPAAttnVarlenFunc, _ffpa_attn_forward


def ffpa_attn_func(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                   **kwargs):
  forward_backend = kwargs.get("forward_backend")
  if forward_backend is None:
    forward_backend = kwargs.get("backend")
  if attn_mask is None and dropout_p == 0.0 and "backward_backend" not in kwargs and isinstance(
      forward_backend, CUDABackend):
    out = _ffpa_attn_forward(query, key, value, is_causal, scale, enable_gqa, forward_backend)
    if out is not None:
      return out
  meta = FFPAAttnMeta.from_kwargs(**kwargs)
  if meta.fallback(query, key, attn_mask, dropout_p):
    # HACK: Avoid recursive for monkey-patch usage.
    return torch._C._nn.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                                     is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
  meta, query, key, value, attn_bias = meta.normalize(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                      enable_gqa)
  return FFPAAttnFunc.apply(query, key, value, attn_bias, meta)


def ffpa_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, dropout_p=0.0,
                          softmax_scale=None, causal=False, enable_gqa=False, return_lse=False, **kwargs):
  return FFPAAttnVarlenFunc.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                                  enable_gqa=enable_gqa, return_lse=return_lse, **kwargs)


__all__ = ["ffpa_attn_func", "ffpa_attn_varlen_func"]
