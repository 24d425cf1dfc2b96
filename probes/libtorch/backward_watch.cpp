#include "probes/libtorch/backward_watch.h"

#include <memory>
#include <mutex>
#include <optional>

#include "base/wall_clock.h"
#include "probes/libtorch/call_recorder.h"
#include "probes/libtorch/guarded.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {
namespace {

struct PendingBackward {
  std::mutex mu;
  CallRecorder* recorder = nullptr;  // the process's, never destroyed
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
      if (!rec) {
        rec = recorder->eventFor(recorder->nameBackwardOf(fwd), *desc, Phase::kBackward);
        rec->start_ns = wallClockNs();
      }
      replaced = recorder->injectGradient(*rec, w.role, grad, w.as_recorded);
      const at::Tensor& received = replaced.defined() ? replaced : grad;
      grads.emplace_back(w.role, w.as_recorded ? w.as_recorded(received) : received);
      if (static_cast<int>(grads.size()) == expected) {
        rec->end_ns = wallClockNs();
        if (onCuda(grads)) rec->unattributed = unattributed;
        recorder->finish(std::move(*rec), concat(std::move(fwd_tensors), grads), fwd_args);
        rec.reset();
        grads.clear();
      }
    });
    return replaced;  // undefined: the gradient is left as it is
  }
};

}  // namespace

void watchBackward(CallRecorder& recorder, const CallName& fwd, const AttentionOp& desc, const RoleTensors& fwd_tensors,
                   const CallArgs& args, std::vector<WatchedGradient> watched, const char* unattributed) {
  auto pending = std::make_shared<PendingBackward>();
  pending->recorder = &recorder;
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

}  // namespace nanprov::probes
