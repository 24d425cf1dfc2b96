#include "probes/libtorch/device_checks.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <string>
#include <utility>

#include "base/env.h"
#include "base/log_once.h"
#include "base/records/roles.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"

namespace nanprov::probes {
namespace {

using kernels::TensorView;

constexpr int64_t kPollEvery = 8;  // calls between polls for finished checks
// How long exit waits for checks still in flight (NANPROV_EXIT_WAIT_SECONDS).
constexpr int64_t kDefaultExitWaitSeconds = 30;

}  // namespace

DeviceChecks::DeviceChecks(Session& session, KernelTracer& tracer, CheckedCallSink& sink, DeviceQueueFactory make_queue)
    : session_(session),
      sink_(sink),
      lanes_(sink, held_, std::move(make_queue)),
      graphs_(session, tracer, sink),
      deferred_(session, sink, lanes_, held_),
      measured_(lanes_) {}

void DeviceChecks::submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  ProbeCost::Scope cost(ProbeStage::kSubmitting);
  if (tensors.empty()) {
    session_.record(rec);
    return;
  }
  const int device = rec.device.index;  // finish() found it; -1 on the CPU
  if (device < 0) {
    lanes_.recordOnHost(std::move(rec), tensors, args);
    return;
  }
  c10::Stream stream = currentStream(device);
  // Inside a graph being captured the check is captured too, and runs at every replay
  // (GraphChecks); nothing may be measured on the host there, nor a queue made.
  const bool in_graph = capturing(stream);
  CheckLane* lane = in_graph ? nullptr : lanes_.laneFor(device);
  if (!in_graph && !lane) {
    lanes_.recordOnHost(std::move(rec), tensors, args);
    return;
  }
  // Earlier checks of this thread that finished meanwhile, every few calls, or every lane's when
  // the held tensors near the budget. Never waits, for the GPU or for another collector.
  if (lane && held_.nearBudget()) {
    ProbeCost::Scope collecting(ProbeStage::kCollecting);
    flushDeferred();  // deferred calls hold tensors too: checked now, they can be released soon
    lanes_.collect(false);
  } else if (lane && ++lane->submits % kPollEvery == 0) {
    ProbeCost::Scope collecting(ProbeStage::kCollecting);
    lanes_.collectLane(*lane, false);
  }

  // Inside a graph capture the check must be captured with the call; in a torch.compile'd graph
  // Inductor may reuse the call's buffers with writes no version counter sees: both at once.
  if (lane && !rec.compiled && deferred_.defer(rec, tensors, args, device, stream)) return;

  PendingCheck pending;
  Views views;
  bool unreadable_in_graph = false;
  // A backward's inputs that its forward's check read, unchanged since: their counts are taken
  // from it, not read again (outside graph captures, whose replays are the calls). rec.tensors
  // comes empty and gets one entry per tensor, in order, so the two share indices.
  if (!in_graph && rec.tensors.empty()) pending.inherited = forwards_.inherit(rec, tensors);
  for (const auto& [role, t] : tensors) {
    if (pending.inherited.has(rec.tensors.size())) {
      rec.tensors.push_back(describeTensor(t, role));
      continue;
    }
    std::optional<TensorView> view =
        t.is_cuda() && t.device().index() == device ? viewOf(t, holdsMaskedRows(role)) : std::nullopt;
    if (!view || views.size() == views.capacity()) {  // rare: float64, more than 6 dims
      if (in_graph) {                                 // the host cannot measure it there
        unreadable_in_graph = true;
        break;
      }
      rec.tensors.push_back(measureTensor(t, role));
      lanes_.countHostSyncs(1);
      continue;
    }
    pending.checked.push_back(static_cast<uint8_t>(rec.tensors.size()));
    rec.tensors.push_back(describeTensor(t, role));
    views.push_back(*view);
  }
  if (in_graph) {
    session_.callBegun(-1);  // this call did not run: its graph's replays are the calls
    std::string why = unreadable_in_graph ? "attention captured into a CUDA graph with a tensor the check cannot read"
                      : views.empty() ? "attention captured into a CUDA graph with no tensor to check"
                                      : graphs_.capture(rec, pending.checked, views.data(),
                                                        static_cast<int>(views.size()), device, stream.native_handle());
    if (!why.empty()) {
      logOnce("graph capture", why + ": not checked");
      session_.countUnprobed(why);
    }
    return;
  }
  if (views.empty()) {  // every other tensor measured on the host: nothing in flight to wait for
    if (!pending.inherited.empty() && pending.inherited.forward->state() == ForwardCounts::State::kDone) {
      pending.inherited.fillInto(rec);
    } else {  // rare (no tensor the kernel reads): the inherited ones measured too
      for (const auto& [index, from] : pending.inherited.pairs) {
        const auto& [role, t] = tensors[index];
        rec.tensors[index] = measureTensor(t, role);
        lanes_.countHostSyncs(1);
      }
    }
    sink_.record(std::move(rec), tensors, args);
    return;
  }
  if (rec.tensors.size() == tensors.size()) pending.forward = forwards_.remember(rec, tensors, pending.checked);
  pending.rec = std::move(rec);
  if (GraphChecks::inGraphPool()) {
    pending.missing = "its tensors live in a CUDA graph's memory pool (torch.compile's cudagraph warm-up), never held";
  } else {
    pending.args = args;  // IValues that may hold tensors, held as the tensors are
  }
  std::optional<PendingCheck> failed = lanes_.enqueue(*lane, std::move(pending), views, stream, &tensors);
  if (failed) {
    if (failed->forward) failed->forward->fail();  // measured below, but its backward may not wait for that
    failed->rec.tensors.clear();
    lanes_.recordOnHost(std::move(failed->rec), tensors, failed->args);
  }
}

void DeviceChecks::submitHost(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  if (!rec.compiled && deferred_.defer(rec, tensors, args, -1, std::nullopt)) return;
  // A backward's inputs its forward measured, unchanged since: their counts are taken from it.
  InheritedTensors inherited = rec.tensors.empty() ? forwards_.inherit(rec, tensors) : InheritedTensors{};
  if (!inherited.empty() && inherited.forward->state() != ForwardCounts::State::kDone) inherited = {};
  for (const auto& [role, t] : tensors) {
    rec.tensors.push_back(inherited.has(rec.tensors.size()) ? describeTensor(t, role) : measureTensor(t, role));
  }
  if (!inherited.empty()) inherited.fillInto(rec);
  if (rec.tensors.size() == tensors.size()) forwards_.rememberMeasured(rec, tensors);
  sink_.record(std::move(rec), tensors, args);
}

// Step boundaries: every lane's finished checks, taking its turn behind a collector already at
// a lane (which may be recording a call), but never waiting for the GPU.
void DeviceChecks::poll() {
  flushDeferred();
  lanes_.collect(true);
  graphs_.poll();
}

void DeviceChecks::drain() {
  flushDeferred();
  // Exit never hangs on the GPU: a stream stuck behind a hung kernel or collective (a dead peer)
  // would otherwise keep a process that was meant to end waiting forever.
  static const int64_t seconds = envInteger("NANPROV_EXIT_WAIT_SECONDS", kDefaultExitWaitSeconds, 0);
  const auto deadline = DeviceQueue::Clock::now() + std::chrono::seconds(seconds);
  int unfinished = 0;
  lanes_.drain(deadline, &unfinished);
  graphs_.drain(deadline, &unfinished);
  if (unfinished > 0) {
    logOnce("exit wait", std::to_string(unfinished) + " checks had not finished " + std::to_string(seconds) +
                             " s after the run ended (a GPU stream still busy, or stuck behind a hung kernel or "
                             "collective): their calls are not recorded. NANPROV_EXIT_WAIT_SECONDS sets the wait");
  }
}

void DeviceChecks::graphCaptureBegan(int64_t key) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  graphs_.captureBegan(key, currentStream(guard.getDevice().index()).native_handle());
}

}  // namespace nanprov::probes
