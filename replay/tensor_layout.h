// Captured tensors laid out in memory as the run had them. A capture holds each tensor's values
// contiguously, plus how the run's tensor sat in memory (stride.ROLE, offset.ROLE, align.ROLE):
// kernels choose vectorised loads and fast paths by strides and the data pointer's alignment
// (EFFICIENT's misaligned reads at odd storage offsets, pytorch#183484; TMA on views of a fused
// buffer), so a replay that feeds them a fresh contiguous tensor may not run what the run ran.
// Each tensor is rebuilt in a larger buffer, at its storage offset, with its data pointer at the
// same alignment; what cannot be rebuilt is said, never silently changed.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

#include "base/status.h"
#include "replay/replay_result.h"

namespace nanprov::replay {

// The layout the capture's metadata records for `role` of `dims` dimensions; absent parts stay
// unset. A malformed or impossible value is an error (one line).
StatusOr<TensorLayout> recordedLayout(const std::map<std::string, std::string>& meta, const std::string& role,
                                      int64_t dims);

// The layout `t` has: strides, storage offset, data-pointer alignment.
TensorLayout layoutOf(const at::Tensor& t);

// `values` (as the capture holds them) rebuilt on the CPU with `recorded`'s layout where it can be.
// `report` gets both layouts and, when they differ, why ("layout not recorded, replayed contiguous").
at::Tensor withRecordedLayout(const at::Tensor& values, const TensorLayout& recorded, LayoutReport* report);

// A copy of `t` on `device` in memory of its own, laid out as `t` is (strides, storage offset,
// alignment): how each backend gets the captured tensors. Falls back to a dense copy only for
// layouts no copy can write (overlapping strides).
at::Tensor replicaOn(const at::Tensor& t, const at::Device& device);

}  // namespace nanprov::replay
