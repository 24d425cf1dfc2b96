#include "probes/libtorch/backward_watch.h"

#include <memory>
#include <mutex>
#include <optional>

#include "base/wall_clock.h"
#include "probes/core/session.h"
#include "probes/libtorch/call_recording.h"
#include "probes/libtorch/probes.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov {
namespace {

struct PendingBackward {
  std::mutex mu;
  CallName fwd;
  const AttentionOp* desc = nullptr;
  const char* unattributed = "";
  RoleTensors fwd_tensors;
  CallArgs fwd_args;
  RoleTensors grads;
  std::optional<CallEvent> rec;  // named when the first gradient (dO) arrives
  int expected = 0;

  at::Tensor receive(const WatchedGradient& w, const at::Tensor& grad) {
    std::lock_guard<std::mutex> lock(mu);
    at::Tensor replaced;
    guarded("backward probe", [&] {
      Session& session = probes().session();
      if (!rec) {
        rec = recordFor(session.identity().backwardOf(fwd), *desc, Phase::kBackward);
        rec->start_ns = wallClockNs();
      }
      auto recorded = [&](const at::Tensor& g) { return w.as_recorded ? w.as_recorded(g) : g; };
      for (const InjectionSpec& spec : session.injections()) {
        if (spec.tensor == w.role && spec.where.matches(session.rank(), rec->layer, rec->step, rec->call, Phase::kBackward)) {
          replaced = grad.clone();
          corrupt(recorded(replaced), spec);
          rec->injected = roleName(w.role);
        }
      }
      grads.emplace_back(w.role, recorded(replaced.defined() ? replaced : grad));
      if (static_cast<int>(grads.size()) == expected) {
        rec->end_ns = wallClockNs();
        if (onCuda(grads)) rec->unattributed = unattributed;
        finish(std::move(*rec), concat(std::move(fwd_tensors), grads), fwd_args);
        rec.reset();
        grads.clear();
      }
    });
    return replaced;  // undefined: the gradient is left as it is
  }
};

}  // namespace

void watchBackward(const CallName& fwd, const AttentionOp& desc, const RoleTensors& fwd_tensors, const CallArgs& args,
                   std::vector<WatchedGradient> watched, const char* unattributed) {
  auto pending = std::make_shared<PendingBackward>();
  pending->fwd = fwd;
  pending->desc = &desc;
  pending->unattributed = unattributed;
  pending->fwd_args = args;
  // Detached: the hooks below live in these tensors' autograd metadata, so holding the tensors
  // themselves would make a cycle that never frees them.
  for (const auto& [role, t] : fwd_tensors) pending->fwd_tensors.emplace_back(role, t.detach());
  pending->expected = static_cast<int>(watched.size());
  for (WatchedGradient& w : watched) {
    at::Tensor t = std::move(w.tensor);
    w.tensor = at::Tensor();  // the hook holds no tensor of its own (see above)
    t.register_hook([pending, w = std::move(w)](const at::Tensor& grad) { return pending->receive(w, grad); });
  }
}

}  // namespace nanprov
