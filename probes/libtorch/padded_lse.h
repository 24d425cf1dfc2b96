// Memory-efficient attention (PyTorch's cutlass kernels) returns its log-sum-exp padded to a
// multiple of 32 query rows, and the padding rows hold +inf
// (aten/src/ATen/native/transformers/cuda/attention.cu, kAlignLSE). They are no query's: read
// whole, a clean call's LSE looked non-finite (96 +Inf of 128 for 8 query rows, a float32 model
// compiled on an H100), and its backward, which takes that LSE, looked handed non-finite inputs.
#pragma once

#include "base/records/roles.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {

// Narrows the LSE among `tensors` to the call's query rows (read from Q among `inputs`) where
// `op` is memory-efficient attention and the LSE is padded; leaves everything else as it is.
void unpadLse(const AttentionOp& op, const RoleTensors& inputs, RoleTensors& tensors);

}  // namespace nanprov::probes
