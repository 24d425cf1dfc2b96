// The float64 reference attention that replay judges every backend against (DESIGN.md,
// "Verdict rules": G). Forward gives O and LSE, backward gives dQ, dK, dV from dO, with the
// semantics of PyTorch's SDPA: scale, top-left causal alignment, bool and additive masks with
// broadcasting, GQA/MQA; plus flash-attn's sliding window. A query row that sees no key gives
// O = 0, LSE = -inf and zero gradients, as PyTorch's safe softmax does. Plain C++, no LibTorch:
// tensors are dense row-major float64 arrays, [B, H, S, D].
#pragma once

#include <cstdint>
#include <vector>

#include "store/status.h"

namespace nanprov::reference {

struct AttentionShape {
  int64_t batch = 1;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;  // divides q_heads: q head h reads kv head h / (q_heads / kv_heads)
  int64_t q_len = 1;
  int64_t kv_len = 1;
  int64_t head_dim = 1;  // of Q and K
  int64_t v_dim = 1;     // of V and O
};

// A mask broadcast to [B, Hq, Sq, Sk] through its strides (0 on a broadcast dimension).
struct MaskView {
  enum class Kind { kNone, kBool, kAdditive };
  Kind kind = Kind::kNone;
  const uint8_t* allow = nullptr;    // kBool: nonzero = may attend
  const double* additive = nullptr;  // kAdditive: added to the scaled logits (-inf hides)
  int64_t strides[4] = {0, 0, 0, 0};
};

struct AttentionOptions {
  double scale = 0;        // 0: 1/sqrt(head_dim)
  bool causal = false;     // key j visible to query i when j <= i (top-left, as PyTorch)
  int64_t window_left = -1;   // key j visible when i - left <= j; -1: unbounded
  int64_t window_right = -1;  // key j visible when j <= i + right; -1: unbounded
};

struct Forward {
  std::vector<double> out;  // [B, Hq, Sq, Dv]
  std::vector<double> lse;  // [B, Hq, Sq], natural log
};

struct Gradients {
  std::vector<double> dq;  // [B, Hq, Sq, D]
  std::vector<double> dk;  // [B, Hkv, Sk, D]
  std::vector<double> dv;  // [B, Hkv, Sk, Dv]
};

// Checks the shape and array sizes; the one place that can fail.
Status validate(const AttentionShape& shape, size_t q, size_t k, size_t v);

StatusOr<Forward> forward(const AttentionShape& shape, const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const MaskView& mask, const AttentionOptions& options);

// Recomputes the probabilities from Q, K and the mask, then differentiates with `dout`.
StatusOr<Gradients> backward(const AttentionShape& shape, const std::vector<double>& q, const std::vector<double>& k,
                             const std::vector<double>& v, const MaskView& mask, const AttentionOptions& options,
                             const std::vector<double>& dout);

// The same on the first CUDA device (kernels/reference_attention_cuda.cu), built where the CUDA
// toolkit is. Results match the CPU's to rounding: each value is one sequential float64 sum.
bool cudaReferenceAvailable();
StatusOr<Forward> forwardCuda(const AttentionShape& shape, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const MaskView& mask, const AttentionOptions& options);
StatusOr<Gradients> backwardCuda(const AttentionShape& shape, const std::vector<double>& q, const std::vector<double>& k,
                                 const std::vector<double>& v, const MaskView& mask, const AttentionOptions& options,
                                 const std::vector<double>& dout);

}  // namespace nanprov::reference
