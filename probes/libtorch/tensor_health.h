// Health of one tensor, exact: NaN, +Inf, -Inf, largest finite |x|, all-zero, and for masks
// the fully masked rows. This is the synchronous path: CPU tensors, and CUDA tensors the fused
// kernel cannot read (probes/libtorch/device_checks.h). Reading never changes the tensor.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <utility>
#include <vector>

#include "base/records/call_event.h"
#include "base/records/call_record.h"
#include "base/records/roles.h"
#include "probes/core/injection.h"

namespace nanprov::probes {

// The tensors of one call with their roles, in the order they are recorded. Inline: filling one
// per call allocates nothing.
using RoleTensors = c10::SmallVector<std::pair<Role, at::Tensor>, kMaxCallTensors>;

// The index of the first CUDA device among `tensors`; -1 when they all live on the CPU.
int cudaDeviceOf(const RoleTensors& tensors);

// Role, dtype, shape and element count; the counts are left for a check to fill.
TensorHealth describeTensor(const at::Tensor& t, Role role);
TensorHealth measureTensor(const at::Tensor& t, Role role);
// The counts alone (no role, dtype or shape, and no masked rows): what the gradient sentinel reads.
TensorHealth measureValues(const at::Tensor& t);

// Corrupts `t` in place as `spec` says (fault injection only).
void corrupt(const at::Tensor& t, const InjectionSpec& spec);

}  // namespace nanprov::probes
