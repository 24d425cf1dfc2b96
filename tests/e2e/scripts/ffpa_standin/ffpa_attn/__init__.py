"""A stand-in for `ffpa-attn` 0.2.4 (package `ffpa_attn`), for nanprov's CPU tests: FFPA runs only on
NVIDIA GPUs (the GPU tests run the real one, scripts/device-ffpa.sh). It keeps FFPA's module layout and
what nanprov relies on: `ffpa_attn_func` (SDPA's signature, [B, H, N, D]) that sends small head_dims
and short sequences straight to SDPA, the torch.autograd.Function `functional._FFPAAttnFunc` with its
forward(ctx, q, k, v, attn_bias, meta) and backward(ctx, grad_out), the tensors it saves (q, k, v, O,
lse, rng_state, unused, each .contiguous()), and its Triton ops `ffpa_attn::_fwd_triton` and
`ffpa_attn::_bwd_triton` with their real schemas, here with CPU kernels in plain PyTorch (float32
scores, so finite bf16 inputs with large logits overflow as a kernel's float32 accumulator does).
Nothing here is under test: nanprov's wrappers are."""
from .ffpa_attn_interface import ffpa_attn_func, ffpa_attn_varlen_func
from .functional import (
  Backend,
  CUDABackend,
  CuTeDSLBackend,
  SDPABackend,
  TritonBackend,
)
from .version import __version__

__all__ = [
  "Backend",
  "CUDABackend",
  "CuTeDSLBackend",
  "SDPABackend",
  "TritonBackend",
  "ffpa_attn_func",
  "ffpa_attn_varlen_func",
  "__version__",
]
