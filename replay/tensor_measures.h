// The measures of B against G (replay/verdict.h) taken by LibTorch where the tensors are: on the
// GPU a comparison of a (2, 16, 4096, 128) output takes milliseconds, where copying G and B to
// the host and folding them there took a third of a second per backend.
#pragma once

#include <ATen/ATen.h>

#include "replay/verdict.h"

namespace nanprov::replay {

// `b` in any floating dtype, on any device (moved to `g`'s); `g` float64, dense [batch, heads,
// rows, cols] as `grid` says. The same counts, maxima and row flags as measure(), and sums equal
// to it up to rounding order.
Measures measureTensors(const Grid& grid, const at::Tensor& b, const at::Tensor& g);

}  // namespace nanprov::replay
