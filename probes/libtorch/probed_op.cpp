#include "probes/libtorch/probed_op.h"

#include <c10/core/impl/TorchDispatchModeTLS.h>

#include "probes/libtorch/call_rerun.h"
#include "probes/libtorch/probe_thread.h"

namespace nanprov::probes {
namespace {

using Stack = torch::jit::Stack;

// The first of the `n` entries that end `stack`.
Stack::const_iterator startOfLast(const Stack& stack, size_t n) { return stack.end() - static_cast<std::ptrdiff_t>(n); }

}  // namespace

ProbedOp ProbedOp::resolve(const c10::OperatorHandle& handle, const AttentionOp* desc) {
  ProbedOp probed;
  probed.desc = desc;
  const auto& args = handle.schema().arguments();
  probed.num_arguments = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (auto role = roleOfArgument(args[i].name())) probed.inputs.emplace_back(i, *role);
    else probed.others.emplace_back(i, args[i].name());
  }
  return probed;
}

void ProbedOp::offerReruns(const c10::OperatorHandle& handle, bool user_op) const {
  if (desc->phase != Phase::kForward) return;
  RerunnableOp recipe{
      .handle = handle, .desc = desc, .inputs = inputs, .num_arguments = num_arguments, .user_op = user_op};
  for (const auto& [index, name] : others) recipe.others.push_back(index);
  for (const auto& [index, role] : inputs) {
    if (role == Role::kO) recipe.out_argument = index;
  }
  registerRerunnableOp(std::move(recipe));
}

RoleTensors ProbedOp::takeInputs(const Stack& stack) const {
  RoleTensors taken;
  auto first = startOfLast(stack, num_arguments);
  for (const auto& [index, role] : inputs) {
    const c10::IValue& v = *(first + static_cast<std::ptrdiff_t>(index));
    if (v.isTensor() && v.toTensor().defined()) taken.emplace_back(role, v.toTensor());
  }
  return taken;
}

CallArgs ProbedOp::takeArgs(const Stack& stack) const {
  CallArgs args;
  auto first = startOfLast(stack, num_arguments);
  for (const auto& [index, name] : others) args.emplace_back(name, *(first + static_cast<std::ptrdiff_t>(index)));
  return args;
}

bool probeable(const Stack& stack, size_t num_arguments) {
  if (c10::impl::TorchDispatchModeTLS::any_modes_set()) return false;  // e.g. FakeTensorMode
  for (auto it = startOfLast(stack, num_arguments); it != stack.end(); ++it) {
    if (it->isTensor() && !realTensor(it->toTensor())) return false;
    if (it->isOptionalTensorList() || it->isTensorList()) return false;  // no attention op takes lists
  }
  return true;
}

RoleTensors takeOutputs(const AttentionOp& desc, const Stack& stack, size_t num_returns) {
  RoleTensors outputs;
  auto first = startOfLast(stack, num_returns);
  for (size_t i = 0; i < desc.outputs.size() && i < num_returns; ++i) {
    const c10::IValue& v = *(first + static_cast<std::ptrdiff_t>(i));
    if (v.isTensor() && v.toTensor().defined()) outputs.emplace_back(desc.outputs[i], v.toTensor());
  }
  return outputs;
}

at::Tensor tensorOf(const RoleTensors& tensors, Role role) {
  for (const auto& [r, t] : tensors) {
    if (r == role) return t;
  }
  return {};
}

uintptr_t addressOf(const RoleTensors& tensors, Role role) {
  for (const auto& [r, t] : tensors) {
    if (r == role && t.has_storage()) return reinterpret_cast<uintptr_t>(t.data_ptr());
  }
  return 0;
}

}  // namespace nanprov::probes
