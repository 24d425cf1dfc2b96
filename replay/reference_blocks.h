// G, the float64 reference that replay judges every backend by (DESIGN.md, "Verdict rules"), as
// float64 GEMMs per (batch, head) block, a slab of query rows at a time: cuBLAS DGEMM on a GPU,
// the CPU's multi-threaded BLAS on the CPU. Semantics of PyTorch's SDPA: scale, top-left causal,
// bool and additive masks broadcast to [B, Hq, Sq, Sk], GQA/MQA. A query row that sees no key
// gives O = 0, LSE = -inf and zero gradients (PyTorch's safe softmax). Checked against
// PyTorch's float64 MATH backend and autograd to 1e-12 (tests/replay/reference_blocks_test.cpp).
#pragma once

#include <ATen/ATen.h>

namespace nanprov::replay {

struct ReferenceInputs {
  at::Tensor q, k, v;  // [B, Hq, Sq, D], [B, Hkv, Sk, D], [B, Hkv, Sk, Dv], any float dtype
  at::Tensor mask;     // undefined, bool (true: may attend) or additive; broadcasts to [B, Hq, Sq, Sk]
  at::Tensor dout;     // [B, Hq, Sq, Dv]; undefined: forward only
  double scale = 0;    // 0: 1/sqrt(D)
  bool causal = false;
  int64_t slab_rows = 0;  // query rows per GEMM slab; 0: as many as keep a slab's scores near 256 MiB
};

// Float64, on `device`; dq, dk, dv are undefined without dout.
struct ReferenceOutputs {
  at::Tensor o, lse, dq, dk, dv;
};

ReferenceOutputs referenceByBlocks(const ReferenceInputs& in, const at::Device& device);

}  // namespace nanprov::replay
