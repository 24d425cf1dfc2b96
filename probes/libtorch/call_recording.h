// How a probed call becomes a record: named where it ran, its kernels traced while it runs, its
// tensors measured and offered for capture. Shared by the dispatcher probes (attention_hook.cpp)
// and the probes of attention that runs no ATen op (foreign_calls.cpp).
#pragma once

#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/guarded.h"
#include "probes/core/call_identity.h"
#include "base/records/roles.h"
#include "probes/core/session.h"

namespace nanprov {

// True while this thread is inside a probed op: attention inside it is part of that call.
bool insideProbedOp();
// Whether a tensor holds real data the probes may read (not a FakeTensor, functional wrapper or
// meta tensor of torch.compile's tracing).
bool realTensor(const at::Tensor& t);

// True while this thread runs a probed op or SDPA's composite: a softmax there is SDPA's own.
bool insideAttentionCall();

// Held around an attention call that is not probed: in a DataLoader worker (Session::becomeWorker)
// the outermost one on the thread is counted for the rank, once, whatever runs inside it (SDPA's
// fused op, the fast path's SDPA). Elsewhere it does nothing.
class WorkerCall {
 public:
  WorkerCall();
  ~WorkerCall();
  WorkerCall(const WorkerCall&) = delete;
  WorkerCall& operator=(const WorkerCall&) = delete;

 private:
  bool held_ = false;
};

// Where a forward call runs (module, recompute, grad mode), and its name there; a call that
// begins the next inference forward pass closes the last one. Given the call's Q, the module is
// found from the parameter behind Q once that is trusted (probes/libtorch/module_path_cache.h).
ForwardSite siteOfForward(const at::Tensor& q = {});
CallName nameForward(const ForwardSite& site);
// The same, for a call that already ran: made findable by its backward through `link` (the
// address of its output O) under the same lock.
CallName nameForward(const ForwardSite& site, uintptr_t link);

// `desc`'s name and backend must outlive the process (the probed ops' tables, or interned).
CallEvent recordFor(const CallName& name, const AttentionOp& desc, Phase phase);
bool onCuda(const RoleTensors& tensors);
RoleTensors concat(RoleTensors a, const RoleTensors& b);

// Corrupts matching outputs (only with --inject).
void inject(CallEvent& rec, const RoleTensors& outputs);

// Measures every tensor of a finished call and records it: asynchronously on CUDA; on the CPU
// synchronously, with the op itself as the call's kernel.
void finish(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);

// Traces one CUDA call's kernels: an NVTX range and a CUPTI external correlation id from
// construction to destruction, on the thread that runs it.
class CallTrace {
 public:
  CallTrace(const CallName& name, int rank);
  ~CallTrace();
  CallTrace(const CallTrace&) = delete;
  CallTrace& operator=(const CallTrace&) = delete;

  // Empty when the call's kernels are being attributed; interned (base/interned_text.h).
  const char* unattributed() const { return reason_; }

 private:
  bool traced_ = false;
  const char* reason_ = "";
};

}  // namespace nanprov
