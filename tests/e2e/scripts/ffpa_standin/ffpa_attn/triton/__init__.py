"""FFPA's Triton forward and backward ops, as 0.2.4 registers them (same names and schemas), with
plain-PyTorch CPU kernels in place of the Triton ones (stand-in; see the package docstring)."""
import math

import torch

_OP_NAMESPACE = "ffpa_attn"


def _attention(q, k, v, attn_bias, softmax_scale, causal):
  """float32 scores and softmax, as the kernel accumulates; GQA by repeating K and V per query head."""
  group = q.size(1) // k.size(1)
  if group > 1:
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
  scores = (q.float() @ k.float().transpose(-2, -1)) * softmax_scale
  if attn_bias is not None:
    scores = scores + attn_bias.float()
  if causal:  # queries aligned to the KV tail
    sq, sk = scores.shape[-2:]
    allow = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
    scores = scores.masked_fill(~allow, float("-inf"))
  return scores.softmax(-1) @ v.float(), scores.logsumexp(-1)


torch.library.define(
  f"{_OP_NAMESPACE}::_fwd_triton",
  "(Tensor q, Tensor k, Tensor v, Tensor? attn_bias, float softmax_scale, "
  "int causal, int autotune, int autotune_mode_is_max, float dropout_p, int philox_seed, int philox_offset, "
  "int enable_tma, int enable_ws) "
  "-> (Tensor o, Tensor softmax_lse)",
)


@torch.library.impl(f"{_OP_NAMESPACE}::_fwd_triton", "CPU")
def _fwd_triton_torch_op(q, k, v, attn_bias, softmax_scale, causal, autotune, autotune_mode_is_max, dropout_p,
                         philox_seed, philox_offset, enable_tma, enable_ws):
  out, lse = _attention(q, k, v, attn_bias, softmax_scale, bool(causal))
  o = torch.empty_like(q)  # strided like q, as FFPA allocates it
  o.copy_(out)
  seqlen_q = q.size(2)
  # Rows past seqlen_q are never written by the kernel: NaN here, what unwritten memory may hold.
  softmax_lse = torch.full((q.size(0), q.size(1), ((seqlen_q + 127) // 128) * 128), float("nan"))
  softmax_lse[..., :seqlen_q] = lse
  return o, softmax_lse


torch.library.define(
  f"{_OP_NAMESPACE}::_bwd_triton",
  "(Tensor dO, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor? attn_bias, "
  "float softmax_scale, int causal, int autotune, "
  "int autotune_mode_is_max, int preprocess_d_chunk, int return_attn_bias_grad, int grad_kv_storage_dtype_code, "
  "int grad_q_storage_dtype_code, "
  "int original_nheads_kv, float dropout_p, int philox_seed, int philox_offset, int enable_tma, int enable_ws, "
  "int enable_persist_dkdv, int enable_split_launch) "
  "-> (Tensor dq, Tensor dk, Tensor dv, Tensor grad_attn_bias)",
)


@torch.library.impl(f"{_OP_NAMESPACE}::_bwd_triton", "CPU")
def _bwd_triton_torch_op(do, q, k, v, o, lse, attn_bias, softmax_scale, causal, autotune, autotune_mode_is_max,
                         preprocess_d_chunk, return_attn_bias_grad, grad_kv_storage_dtype_code,
                         grad_q_storage_dtype_code, original_nheads_kv, dropout_p, philox_seed, philox_offset,
                         enable_tma, enable_ws, enable_persist_dkdv, enable_split_launch):
  with torch.enable_grad():
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    out, _ = _attention(*leaves, attn_bias, softmax_scale, bool(causal))
    dq, dk, dv = torch.autograd.grad(out, leaves, do.float())
  return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), q.new_empty(0)


def _ffpa_attn_forward_triton(Q, K, V, O=None, causal=False, softmax_scale=0.0, autotune=False, autotune_mode="fast",
                              attn_bias=None, dropout_p=0.0, philox_seed=0, philox_offset=0, enable_tma=False,
                              enable_ws=False):
  del O
  seqlen_q = Q.size(2)
  O_storage, softmax_lse_storage = torch.ops.ffpa_attn._fwd_triton(
    Q, K, V, attn_bias, softmax_scale, int(causal), int(autotune), int(autotune_mode == "max"), dropout_p,
    philox_seed, philox_offset, int(enable_tma), int(enable_ws))
  return O_storage, softmax_lse_storage[..., :seqlen_q]


def _ffpa_attn_backward_triton(grad_out, q, k, v, o, lse, causal=False, softmax_scale=None, autotune=False,
                               autotune_mode="fast", preprocess_d_chunk=False, attn_bias=None,
                               return_attn_bias_grad=False, grad_kv_storage_dtype=None, grad_q_storage_dtype=None,
                               dropout_p=0.0, philox_seed=0, philox_offset=0, enable_tma=False, enable_ws=False,
                               enable_persist_dkdv=False, enable_split_launch=False):
  seqlen_q_rounded = ((q.size(2) + 127) // 128) * 128
  if lse.size(-1) < seqlen_q_rounded:
    lse_padded = torch.full((*lse.shape[:-1], seqlen_q_rounded), float("nan"), dtype=lse.dtype, device=lse.device)
    lse_padded[..., :lse.size(-1)] = lse
    lse = lse_padded
  dq, dk, dv, grad_attn_bias = torch.ops.ffpa_attn._bwd_triton(
    grad_out.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), o.contiguous(), lse, attn_bias,
    softmax_scale or (1.0 / math.sqrt(q.size(-1))), int(causal), int(autotune), int(autotune_mode == "max"),
    int(preprocess_d_chunk), int(return_attn_bias_grad and attn_bias is not None), 0, 0, k.size(1), dropout_p,
    philox_seed, philox_offset, int(enable_tma), int(enable_ws), int(enable_persist_dkdv),
    int(enable_split_launch))
  return dq, dk, dv, (grad_attn_bias if grad_attn_bias.numel() else None)


__all__ = ["_ffpa_attn_forward_triton", "_ffpa_attn_backward_triton"]
