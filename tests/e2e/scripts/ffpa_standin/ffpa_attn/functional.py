"""FFPAAttnMeta and the FFPAAttnFunc autograd Function (stand-in; see the package docstring): the
dispatch of ffpa-attn 0.2.4's functional.py, for the default Triton backend, kept to what decides
which calls FFPA runs itself and what its autograd function receives and saves."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch

from .triton import _ffpa_attn_backward_triton, _ffpa_attn_forward_triton

_ATEN_SMALL_HEAD_DIM_MAX = 256
_FFPA_SMALL_HEAD_DIM_MIN = 64


@dataclass
class Backend:
  name: str
  forward: bool | None = None
  backward: bool | None = None


@dataclass
class SDPABackend(Backend):
  name: str = "sdpa"
  high_precision_grad: bool = False


@dataclass
class CUDABackend(Backend):
  name: str = "cuda"


@dataclass
class TritonBackend(Backend):
  name: str = "triton"
  autotune: bool = False
  autotune_mode: str = "fast"
  enable_tma: bool = False
  enable_ws: bool = False


@dataclass
class CuTeDSLBackend(Backend):
  name: str = "cutedsl"


_BACKENDS = {"sdpa": SDPABackend, "cuda": CUDABackend, "triton": TritonBackend, "cutedsl": CuTeDSLBackend}


def _coerce(backend):
  return _BACKENDS[backend]() if isinstance(backend, str) else backend


def _should_use_aten_small_d_forward(forward_backend: Backend, head_dim: int) -> bool:
  return head_dim <= _ATEN_SMALL_HEAD_DIM_MAX  # small-D opt-in environment flags: not modelled


def _ffpa_attn_forward(query, key, value, is_causal, scale, enable_gqa, forward_backend):
  """The CUDA backend's no-grad fast path: its extension is not built here, so it always declines."""
  return None


@dataclass
class AttentionMeta:
  is_causal: bool = False
  scale: float = 0.0
  dropout_p: float = 0.0
  is_grad_enabled: bool = False


@dataclass
class FFPAAttnMeta:
  attn_meta: AttentionMeta = field(default_factory=AttentionMeta)
  forward_meta: Backend = field(default_factory=lambda: TritonBackend(forward=True))
  backward_meta: Backend = field(default_factory=lambda: TritonBackend(backward=True))

  @classmethod
  def from_kwargs(cls, **kwargs) -> FFPAAttnMeta:
    backend = kwargs.pop("backend", None)
    forward_backend = kwargs.pop("forward_backend", None)
    backward_backend = kwargs.pop("backward_backend", None)
    if kwargs:
      raise TypeError(f"ffpa_attn_func() got unexpected keyword argument(s): {', '.join(sorted(kwargs))}")
    forward_backend = _coerce(forward_backend or backend or TritonBackend(forward=True))
    backward_backend = _coerce(backward_backend or backend or TritonBackend(backward=True))
    return cls(forward_meta=forward_backend, backward_meta=backward_backend)

  def fallback(self, query, key, attn_mask, dropout_p) -> bool:
    if self.forward_meta.name == "sdpa":
      return True
    if os.environ.get("FFPA_FORCE_NO_SDPA_FALLBACK", "0") not in ("", "0"):
      return False
    D, Nq, Nkv = query.size(-1), query.size(2), key.size(2)
    return any([_should_use_aten_small_d_forward(self.forward_meta, D), D > 1024, (8 <= Nq < 512), Nkv < 512])

  def normalize(self, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    if query.dtype not in (torch.float16, torch.bfloat16):
      raise TypeError(f"ffpa_attn_func only supports fp16/bf16, got {query.dtype}")
    if not enable_gqa and query.size(1) != key.size(1):
      raise ValueError("enable_gqa=False but query num_heads != key/value num_heads")
    if attn_mask is not None and is_causal:
      raise RuntimeError("ffpa_attn_func: explicit attn_mask should not be set when is_causal=True")
    self.attn_meta.is_causal = is_causal
    self.attn_meta.dropout_p = float(dropout_p)
    self.attn_meta.is_grad_enabled = torch.is_grad_enabled()
    self.attn_meta.scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else float(scale)
    attn_bias = attn_mask
    if attn_mask is not None and attn_mask.dtype == torch.bool:
      attn_bias = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
    return self, query, key, value, attn_bias


class _FFPAAttnFunc(torch.autograd.Function):
  @staticmethod
  def forward(ctx, q, k, v, attn_bias, meta):
    is_grad = meta.attn_meta.is_grad_enabled and any(x.requires_grad for x in (q, k, v, attn_bias) if x is not None)
    fm = meta.forward_meta
    O = torch.empty_like(q)  # noqa: E741
    O, lse = _ffpa_attn_forward_triton(q, k, v, O, meta.attn_meta.is_causal, meta.attn_meta.scale, fm.autotune,
                                       fm.autotune_mode, attn_bias, meta.attn_meta.dropout_p, 0, 0, fm.enable_tma,
                                       fm.enable_ws)
    rng_state = torch.empty(0, dtype=torch.uint8, device=q.device)
    unused = torch.empty(0, dtype=torch.uint8, device=q.device)
    if is_grad:
      ctx.save_for_backward(q.contiguous(), k.contiguous(), v.contiguous(), O.contiguous(), lse, rng_state, unused)
      ctx.attn_bias = attn_bias
      ctx.meta = meta
    return O

  @staticmethod
  def backward(ctx, grad_out):
    q, k, v, O, lse, rng_state, unused = ctx.saved_tensors
    meta = ctx.meta
    dq, dk, dv, grad_attn_bias = _ffpa_attn_backward_triton(
      grad_out=grad_out, q=q, k=k, v=v, o=O, lse=lse, causal=meta.attn_meta.is_causal,
      softmax_scale=meta.attn_meta.scale, attn_bias=getattr(ctx, "attn_bias", None),
      return_attn_bias_grad=ctx.needs_input_grad[3], dropout_p=meta.attn_meta.dropout_p)
    return dq, dk, dv, grad_attn_bias, None


@torch._dynamo.disable
def _ffpa_apply(*args, **kwargs):
  return _FFPAAttnFunc.apply(*args, **kwargs)


class FFPAAttnFunc:
  @classmethod
  def apply(cls, *args, **kwargs):
    return _ffpa_apply(*args, **kwargs)


class FFPAAttnVarlenFunc:
  """Packed sequences run only through FFPA's CuTe DSL backend, which needs an SM80/SM90 GPU."""

  @classmethod
  def apply(cls, *args, **kwargs):
    raise NotImplementedError("ffpa_attn_varlen_func: the CuTeDSL backend is not available on this device")


__all__ = ["FFPAAttnMeta", "FFPAAttnFunc", "FFPAAttnVarlenFunc"]
