// ProbedOp: an attention op the probes wrap, resolved once against this torch build's schema
// (which argument is which role, and every other argument kept for captures), and what one call's
// dispatcher stack holds for it: its role tensors, its other arguments, its outputs. The
// dispatcher wrappers (attention_hook.cpp) read every call through it.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/records/roles.h"
#include "probes/libtorch/call_args.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {

struct ProbedOp {
  const AttentionOp* desc = nullptr;
  std::vector<std::pair<size_t, Role>> inputs;         // argument index → role
  std::vector<std::pair<size_t, std::string>> others;  // every other argument, for captures
  size_t num_arguments = 0;

  // `handle`'s arguments named by the roles table (roleOfArgument), described by `desc`.
  static ProbedOp resolve(const c10::OperatorHandle& handle, const AttentionOp* desc);
  // Offers a forward op's calls to be run again when captured (call_rerun.h); `user_op`: named by
  // --probe-op. Backward ops are not offered.
  void offerReruns(const c10::OperatorHandle& handle, bool user_op = false) const;
  // The role tensors of the call whose arguments end `stack` (undefined ones left out).
  RoleTensors takeInputs(const torch::jit::Stack& stack) const;
  // Its other arguments: IValue copies only (a refcount for tensors), formatted if the call is
  // ever captured.
  CallArgs takeArgs(const torch::jit::Stack& stack) const;
};

// True when the `num_arguments` arguments that end `stack` can be read: real tensors (not fake,
// meta or functional), no tensor lists, no dispatch mode active.
bool probeable(const torch::jit::Stack& stack, size_t num_arguments);
// The outputs of `desc` among the `num_returns` returns that end `stack`, by role.
RoleTensors takeOutputs(const AttentionOp& desc, const torch::jit::Stack& stack, size_t num_returns);
// The tensor of `role` (undefined when none), and its data's address (0 when none).
at::Tensor tensorOf(const RoleTensors& tensors, Role role);
uintptr_t addressOf(const RoleTensors& tensors, Role role);

}  // namespace nanprov::probes
