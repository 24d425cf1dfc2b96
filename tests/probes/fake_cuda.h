// Tensors on a CUDA device that is not there, for CPU tests of the probes' CUDA paths: their
// memory is the host's, so nothing may launch on them (the fake device queue launches nothing).
// Linking fake_cuda.cpp registers a CUDA device guard for the whole binary (a CPU build of torch
// has none), enough for the probes to ask for the current stream and its handle.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace nanprov::testing {

// A float32 tensor on "cuda:`device`" over `host` (which outlives it), contiguous unless
// `strides` are given.
at::Tensor fakeCuda(std::vector<float>& host, std::vector<int64_t> sizes, std::vector<int64_t> strides = {},
                    int device = 0);

}  // namespace nanprov::testing
