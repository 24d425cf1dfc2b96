// How the fused check walks a tensor. Its counts do not depend on the order it visits elements
// in, so before a launch each value tensor's dimensions are reordered by stride and merged
// wherever two of them address one evenly spaced run. Q, K and V split from one projection
// then read as uniform rows (one row stride, dense rows), and the fused kernels' transposed
// outputs as one dense run: no per-element index arithmetic on the device. Host only.
#pragma once

#include "kernels/health_check.h"

namespace nanprov::kernels {

// `v` with size-1 dimensions dropped, the rest ordered outermost first by stride (broadcast
// dimensions, stride 0, outermost of all) and merged where they form one run. It addresses the
// same elements as `v`, each as often. A mask is returned as it is: its rows are query rows.
TensorView simplified(const TensorView& v);

// True when two views address the same elements as the same type: one check serves both.
bool sameElements(const TensorView& a, const TensorView& b);

}  // namespace nanprov::kernels
