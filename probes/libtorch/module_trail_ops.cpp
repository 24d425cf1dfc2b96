// The ops the bootstrap's module hooks and compiled graphs call (module_trail_ops.h): entry
// points, so they find the process's trail through processProbes().
#include "probes/libtorch/module_trail_ops.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/log_once.h"
#include "probes/core/session.h"
#include "probes/libtorch/probes.h"

namespace nanprov::probes {
namespace {

// The ops' bodies: nothing reaches the training.
bool trailModule(int64_t id, const std::string& path, const std::string& module_class, const std::string& unchecked) {
  if (!processProbes().session().active()) return false;
  return processProbes().trail().name(id, path, module_class, unchecked);
}

void trailEnter(int64_t id) {
  if (processProbes().session().active()) processProbes().trail().enter(id);
}

void trailLeave(int64_t id) {
  if (processProbes().session().active()) processProbes().trail().leave(id);
}

void trailForward(int64_t id, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                  bool inputs_whole) {
  if (!processProbes().session().active()) return;
  try {
    processProbes().trail().forward(id, inputs, outputs, inputs_whole);
  } catch (const std::exception& e) {
    logOnce("trail", std::string("--trail: a module call was not checked: ") + e.what());
  }
}

// Inside torch.compile'd code no module hook runs: the bootstrap puts trail_compiled into the
// graph Dynamo hands to the backend, numbering the graph's modules 0..n-1. One compiled graph can
// serve several places (every block of a model, when Dynamo compiled the block's forward), so the
// graph's wrapper says, per thread and nested graphs stacked, where its first module's number
// starts for the place it runs from (trail_graph_enter), and a check's module is base + slot.
thread_local std::vector<int64_t> t_graph_bases;

void trailGraphEnter(int64_t base) { t_graph_bases.push_back(base); }
void trailGraphExit() {
  if (!t_graph_bases.empty()) t_graph_bases.pop_back();
}

void trailCompiled(int64_t slot, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  // No base: the graph ran outside its wrapper; base -1: the wrapper could not name this place.
  if (t_graph_bases.empty() || t_graph_bases.back() < 0 || slot < 0) return;
  // A module whose inputs Inductor never wrote has none here: they were not seen, not absent.
  trailForward(t_graph_bases.back() + slot, inputs, outputs, !inputs.empty());
}

void trailCompiledBackward(int64_t id, int64_t graph, int64_t position, int64_t checks,
                           const std::vector<at::Tensor>& received, const std::vector<at::Tensor>& sent) {
  if (!processProbes().session().active()) return;
  try {
    processProbes().trail().compiledBackward(id, graph, position, checks, received, sent);
  } catch (const std::exception& e) {
    logOnce("trail backward", std::string("--trail: a module's gradients are not checked: ") + e.what());
  }
}

void trailBackwardUnchecked(int64_t id, const std::string& unchecked) {
  if (processProbes().session().active()) processProbes().trail().backwardUnchecked(id, unchecked);
}

void trailBackwardOff(int64_t first, int64_t count) {
  if (processProbes().session().active()) processProbes().trail().backwardOff(first, count);
}

void trailBackwardState(bool checked) {
  if (processProbes().session().active()) processProbes().trail().compiledBackwardState(checked);
}

}  // namespace

void installModuleTrail() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: dropping the Library deregisters the ops.
    auto* library = new torch::Library(torch::Library::FRAGMENT, "nanprov", std::nullopt, __FILE__, __LINE__);
    library->def("trail_module(int id, str path, str cls, str unchecked=\"\") -> bool", &trailModule);
    library->def("trail_enter(int id) -> ()", &trailEnter);
    library->def("trail_leave(int id) -> ()", &trailLeave);
    library->def("trail_forward(int id, Tensor[] inputs, Tensor[] outputs, bool inputs_whole=True) -> ()",
                 &trailForward);
    // Not a catch-all kernel: that is CompositeImplicitAutograd, which tracing would run on fake
    // tensors, leaving nothing in the graph. The real kernel serves the backends; tracing (fake
    // tensors) runs the empty Meta one. flexible_layout: Inductor hands over its buffers in the
    // layout it chose, so reading them never makes it lay them out differently.
    library->def("trail_compiled(int slot, Tensor[] inputs, Tensor[] outputs) -> ()", {at::Tag::flexible_layout});
    library->impl("trail_compiled", torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, &trailCompiled));
    library->impl("trail_compiled", torch::dispatch(c10::DispatchKey::Meta, [](int64_t, const std::vector<at::Tensor>&,
                                                                               const std::vector<at::Tensor>&) {}));
    library->def(
        "trail_compiled_backward(int id, int graph, int position, int checks, Tensor[] received, Tensor[] sent) -> ()",
        {at::Tag::flexible_layout});
    library->impl("trail_compiled_backward",
                  torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, &trailCompiledBackward));
    library->impl(
        "trail_compiled_backward",
        torch::dispatch(c10::DispatchKey::Meta, [](int64_t, int64_t, int64_t, int64_t, const std::vector<at::Tensor>&,
                                                   const std::vector<at::Tensor>&) {}));
    library->def("trail_backward_unchecked(int id, str unchecked) -> ()", &trailBackwardUnchecked);
    library->def("trail_backward_off(int first, int count) -> ()", &trailBackwardOff);
    library->def("trail_backward_state(bool checked) -> ()", &trailBackwardState);
    library->def("trail_graph_enter(int base) -> ()", &trailGraphEnter);
    library->def("trail_graph_exit() -> ()", &trailGraphExit);
  });
}

}  // namespace nanprov::probes
