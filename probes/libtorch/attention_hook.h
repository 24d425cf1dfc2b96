// Installs the attention probes into the dispatcher. Narrow by design: only the ops of the role
// table are wrapped, so every other op of the training pays nothing (a global RecordFunction
// observer costs 1.16-1.20x on launch-bound steps, GPU.md). The wrappers are entry points: they
// find the process's probes and hand each call to its CallRecorder (call_recorder.h). What they
// know about the thread they run on is said here, for the probes of other attention.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "base/records/roles.h"
#include "base/status.h"

namespace nanprov {

class Session;

// Idempotent. Wraps each op of attentionOps() present in this torch build at the
// BackendSelect key, and aten::scaled_dot_product_attention at the Autograd keys to see the
// MATH path, which has no fused op of its own.
Status installAttentionProbes();

// --probe-op: probes a dispatcher op outside the role table (a library's own attention op, e.g.
// mylib::attn) as a forward call of `backend`. Arguments get roles from `roles` (by
// schema argument name), else from the role table; O is the argument mapped to O (an out buffer
// the op fills), else the op's first result. Errors when the op is not registered (yet) or lacks
// Q, K or V. Idempotent per op.
Status probeOperator(const std::string& name, const std::vector<std::pair<std::string, Role>>& roles,
                     const std::string& backend);

// True while this thread is inside a probed op: attention inside it is part of that call.
bool insideProbedOp();
// Whether a tensor holds real data the probes may read (not a FakeTensor, functional wrapper or
// meta tensor of torch.compile's tracing).
bool realTensor(const at::Tensor& t);

// True while this thread runs a probed op or SDPA's composite: a softmax there is SDPA's own.
bool insideAttentionCall();

// Held while nanprov runs an op itself (call_rerun.h): the probes let every call on this thread
// through, as they do inside a probed op.
class ProbesPassThrough {
 public:
  ProbesPassThrough();
  ~ProbesPassThrough();
  ProbesPassThrough(const ProbesPassThrough&) = delete;
  ProbesPassThrough& operator=(const ProbesPassThrough&) = delete;
};

// Held around an attention call that is not probed: in a DataLoader worker (Session::becomeWorker)
// the outermost one on the thread is counted for the rank, once, whatever runs inside it (SDPA's
// fused op, the fast path's SDPA). Elsewhere it does nothing.
class WorkerCall {
 public:
  explicit WorkerCall(Session& session);
  ~WorkerCall();
  WorkerCall(const WorkerCall&) = delete;
  WorkerCall& operator=(const WorkerCall&) = delete;

 private:
  bool held_ = false;
};

}  // namespace nanprov
