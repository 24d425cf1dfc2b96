// What the check kernels read of a call's tensors and what they give back: a tensor's view
// (kernels::TensorView), the stream a device's checks go on, and the counts filled into a call's
// record. Shared by every path a check takes: at once, deferred, measured and captured into a
// CUDA graph (DeviceChecks, GraphChecks).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <optional>

#include "base/inline_vector.h"
#include "base/records/call_event.h"
#include "kernels/health_check.h"

namespace nanprov::probes {

// The views of one launch: at most kernels::kMaxTensors.
using Views = InlineVector<kernels::TensorView, kernels::kMaxTensors>;
// rec.tensors index of each view a kernel reads.
using CheckedTensors = InlineVector<uint8_t, kMaxCallTensors>;

// The kernel's element type of `t`, or nullopt when it reads no such type.
std::optional<kernels::ElementType> elementType(at::ScalarType t);
// The kernel's view of `t`, or nullopt when it cannot read it; `mask` for a role holding masked
// rows (an additive or a boolean mask).
std::optional<kernels::TensorView> viewOf(const at::Tensor& t, bool mask);
// The current stream of CUDA device `device`, and whether it is capturing a CUDA graph.
c10::Stream currentStream(int device);
bool capturing(const c10::Stream& stream);
// `t`'s version counter: it moves with every in-place change through ATen.
uint32_t versionOf(const at::Tensor& t);

// Fills the counts of rec.tensors[checked[i]] from a kernel's counts[i], i < n.
void takeCounts(CallEvent& rec, const CheckedTensors& checked, const kernels::HealthCounts* counts, int n);

}  // namespace nanprov::probes
