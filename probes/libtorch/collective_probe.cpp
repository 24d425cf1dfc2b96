// The dispatcher's kernels around c10d's collectives (collective_probe.h): entry points, so they
// find the process's collectives' checks through processProbes().
#include "probes/libtorch/collective_probe.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "base/log_once.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"
#include "probes/libtorch/guarded.h"
#include "probes/libtorch/probe_thread.h"
#include "probes/libtorch/probes.h"

namespace nanprov::probes {
namespace {

// The collectives probed. Which argument holds what comes from the schema's names
// (kArgumentParts), so a new op is one row here.
struct CollectiveOp {
  const char* name;
  bool input_on_root_only = false;   // broadcast_: other ranks pass the buffer they receive into
  bool output_on_root_only = false;  // reduce_: only the root's buffer holds the result
};
constexpr CollectiveOp kCollectiveOps[] = {
    {"c10d::allreduce_"},
    {"c10d::allreduce_coalesced_"},
    {"c10d::reduce_", false, true},
    {"c10d::broadcast_", true, false},
    {"c10d::reduce_scatter_"},
    {"c10d::_reduce_scatter_base_"},
    {"c10d::reduce_scatter_tensor_coalesced_"},
    {"c10d::allgather_"},
    {"c10d::_allgather_base_"},
    {"c10d::allgather_coalesced_"},
    {"c10d::allgather_into_tensor_coalesced_"},
    {"c10d::alltoall_"},
    {"c10d::alltoall_base_"},
};

enum class Part : uint8_t { kInput, kOutput, kInPlace, kGroup, kRoot };
constexpr std::pair<const char*, Part> kArgumentParts[] = {
    {"tensors", Part::kInPlace},      {"input", Part::kInput},           {"input_tensor", Part::kInput},
    {"input_tensors", Part::kInput},  {"inputs", Part::kInput},          {"output", Part::kOutput},
    {"output_tensor", Part::kOutput}, {"output_tensors", Part::kOutput}, {"outputs", Part::kOutput},
    {"output_lists", Part::kOutput},  {"input_list", Part::kInput},      {"process_group", Part::kGroup},
    {"root_rank", Part::kRoot},
};

// One probed op, resolved against this torch build's schema: argument indices of each part.
struct ProbedCollective {
  const CollectiveOp* op = nullptr;
  std::vector<size_t> inputs, outputs;
  std::optional<size_t> group, root;
  size_t num_arguments = 0;
};

// Appends the floating-point tensors of a Tensor, Tensor[] or Tensor[][] argument. A tensor that
// holds no data (a FakeTensor while torch.compile traces, a meta tensor) makes the call unreadable.
bool collectTensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!realTensor(t)) return false;
    if (t.defined() && t.is_floating_point() && t.layout() == c10::kStrided && t.numel() > 0) out.push_back(t);
    return true;
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (!collectTensors(e, out)) return false;
    }
  }
  return true;
}

class CollectiveProbe : public c10::OperatorKernel {
 public:
  explicit CollectiveProbe(ProbedCollective probed) : probed_(std::move(probed)) {}

  void operator()(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    static const c10::DispatchKeySet below(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);
    std::optional<uint64_t> id;
    std::vector<at::Tensor> outputs;
    {
      ProbeCost::Scope cost(ProbeStage::kCollectives);
      guarded("collective probe", [&] { id = begin(*stack, outputs); });
    }
    handle.redispatchBoxed(ks & below, stack);
    if (!id) return;
    ProbeCost::Scope cost(ProbeStage::kCollectives);
    guarded("collective probe", [&] { watchCompletion(*id, stack->back(), std::move(outputs)); });
  }

 private:
  // Measures the input and opens the collective; `outputs` gets what to measure once it completed.
  std::optional<uint64_t> begin(const torch::jit::Stack& stack, std::vector<at::Tensor>& outputs) {
    if (!processProbes().session().active() || c10::impl::TorchDispatchModeTLS::any_modes_set()) return std::nullopt;
    if (stack.size() < probed_.num_arguments || !probed_.group) return std::nullopt;
    auto arg = [&](size_t i) -> const c10::IValue& { return stack[stack.size() - probed_.num_arguments + i]; };
    const c10::IValue& group_arg = arg(*probed_.group);
    if (!group_arg.isObject()) return std::nullopt;
    c10::intrusive_ptr<c10d::ProcessGroup> group = group_arg.toCustomClass<c10d::ProcessGroup>();
    const bool root = probed_.root && arg(*probed_.root).isInt() && arg(*probed_.root).toInt() == group->getRank();
    std::vector<at::Tensor> inputs;
    for (size_t i : probed_.inputs) {
      if (!collectTensors(arg(i), inputs)) return std::nullopt;
    }
    for (size_t i : probed_.outputs) {
      if (!collectTensors(arg(i), outputs)) return std::nullopt;
    }
    if (inputs.empty() && outputs.empty()) return std::nullopt;  // integers only: nothing can be non-finite
    if (probed_.op->input_on_root_only && !root) inputs.clear();
    if (probed_.op->output_on_root_only && !root) outputs.clear();
    return processProbes().collectives().begin(probed_.op->name, group->getGroupName(), group->getSize(), inputs);
  }

  // The output is read once the collective completed, in a callback on its Work's future.
  static void watchCompletion(uint64_t id, const c10::IValue& work_value, std::vector<at::Tensor> outputs) {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    if (!outputs.empty() && work_value.isObject()) {
      try {
        future = work_value.toCustomClass<c10d::Work>()->getFuture();
      } catch (const std::exception&) {
        logOnce("collective future", "a collective's Work has no future (this backend): its output is not checked");
      }
    }
    if (!future) {
      processProbes().collectives().complete(id, {});
      return;
    }
    future->addCallback([id, outputs = std::move(outputs)](c10::ivalue::Future& done) {
      guarded("collective output check", [&] {
        processProbes().collectives().complete(id, done.hasError() ? std::vector<at::Tensor>{} : outputs);
      });
    });
  }

  ProbedCollective probed_;
};

ProbedCollective resolve(const c10::OperatorHandle& handle, const CollectiveOp* op) {
  ProbedCollective probed;
  probed.op = op;
  const auto& args = handle.schema().arguments();
  probed.num_arguments = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    for (const auto& [name, part] : kArgumentParts) {
      if (args[i].name() != name) continue;
      if (part == Part::kInput || part == Part::kInPlace) probed.inputs.push_back(i);
      if (part == Part::kOutput || part == Part::kInPlace) probed.outputs.push_back(i);
      if (part == Part::kGroup) probed.group = i;
      if (part == Part::kRoot) probed.root = i;
    }
  }
  return probed;
}

}  // namespace

void installCollectiveProbes() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      auto& dispatcher = c10::Dispatcher::singleton();
      // Leaked on purpose: dropping the Library deregisters its kernels.
      torch::Library* library = nullptr;
      for (const CollectiveOp& op : kCollectiveOps) {
        auto handle = dispatcher.findSchema({op.name, ""});
        if (!handle) continue;  // not in this torch build
        ProbedCollective probed = resolve(*handle, &op);
        if (!probed.group || (probed.inputs.empty() && probed.outputs.empty())) {
          logOnce(std::string("collective schema ") + op.name,
                  std::string(op.name) + " has arguments it does not know; it is not checked");
          continue;
        }
        if (!library)
          library =
              new torch::Library(torch::Library::IMPL, "c10d", c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
        library->impl(op.name + 6,  // drop "c10d::"
                      torch::CppFunction::makeFromBoxedFunctor(std::make_unique<CollectiveProbe>(std::move(probed))));
      }
    } catch (const std::exception& e) {
      logOnce("collective probes", std::string("collectives are not checked: ") + e.what());
    }
  });
}

}  // namespace nanprov::probes
