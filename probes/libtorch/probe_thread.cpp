#include "probes/libtorch/probe_thread.h"

#include <c10/core/DispatchKeySet.h>

#include <algorithm>

#include "probes/core/session.h"

namespace nanprov::probes {
namespace {

// >0 while this thread is inside a probed op: inner attention ops are part of the outer call.
thread_local int t_depth = 0;
thread_local int t_sdpa_depth = 0;  // inside SDPA's composite (its MATH path runs a softmax)
thread_local int t_worker_depth = 0;
thread_local std::vector<OpenBracket> t_open;
thread_local int64_t t_recorded = 0;

void (*g_forget)(Session&) = nullptr;

}  // namespace

// Whether a tensor holds real data the probes may read. While torch.compile traces (Dynamo,
// AOTAutograd) attention runs on FakeTensors, functional wrappers and meta tensors: they have no
// data, and asking Python for a module path from inside the tracer recurses into it. Such calls
// pass through untouched, as if nanprov were absent.
bool realTensor(const at::Tensor& t) {
  if (!t.defined()) return true;
  c10::DispatchKeySet keys = t.key_set();
  return !t.is_meta() && t.has_storage() && t.layout() == c10::kStrided && !keys.has(c10::DispatchKey::Python) &&
         !keys.has(c10::DispatchKey::Functionalize);
}

bool insideProbedOp() { return t_depth > 0; }

InsideProbedOp::InsideProbedOp() { ++t_depth; }
InsideProbedOp::~InsideProbedOp() { --t_depth; }

ProbesPassThrough::ProbesPassThrough() { ++t_depth; }
ProbesPassThrough::~ProbesPassThrough() { --t_depth; }

bool insideAttentionCall() { return t_depth > 0 || t_sdpa_depth > 0; }

InsideSdpa::InsideSdpa() { ++t_sdpa_depth; }
InsideSdpa::~InsideSdpa() { --t_sdpa_depth; }

WorkerCall::WorkerCall(Session& session) {
  if (!session.inWorker()) return;
  held_ = true;
  if (t_worker_depth++ == 0) session.countWorkerCall();
}

WorkerCall::~WorkerCall() {
  if (held_) --t_worker_depth;
}

std::vector<OpenBracket>& openBrackets() { return t_open; }

void countForeignCall() { ++t_recorded; }

int64_t foreignCallsRecorded() { return t_recorded; }

bool insideRecordedCall() {
  for (const OpenBracket& open : t_open) {
    if (open.name && !open.boundary) return true;
  }
  return false;
}

std::optional<CallName> claimBoundaryName() {
  if (t_open.empty()) return std::nullopt;
  OpenBracket& open = t_open.back();
  if (!open.boundary || !open.name || open.claimed) return std::nullopt;
  open.claimed = true;
  return open.name;
}

void noteCheckedCall() {
  for (OpenBracket& open : t_open) open.checked_inside = true;
}

void noteSoftmaxInside(const at::Tensor& scores) {
  if (t_open.empty()) return;
  OpenBracket& open = t_open.back();
  // Only a module's own: once a checked call inside claimed the boundary, the module records nothing.
  if (!open.boundary || !open.name || open.claimed || !scores.is_floating_point()) return;
  if (!open.scores.defined() || scores.numel() > open.scores.numel()) open.scores = scores;
}

void endStepOnThread(Session& session) {
  t_open.clear();
  if (g_forget) g_forget(session);
}

void forgetAtStepBoundary(void (*forget)(Session& session)) { g_forget = forget; }

}  // namespace nanprov::probes
