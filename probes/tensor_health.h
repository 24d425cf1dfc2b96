// HealthCounts of one tensor, exact: NaN, +Inf, -Inf, largest finite |x|, all-zero.
// CPU path only here; reading never changes the tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include "probes/roles.h"
#include "store/call_record.h"

namespace nanprov {

TensorHealth measureTensor(const at::Tensor& t, Role role);

// Corrupts the first element of `t` in place with `value` (fault injection only).
void corruptFirstElement(const at::Tensor& t, double value);

}  // namespace nanprov
