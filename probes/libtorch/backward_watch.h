// The backward of a forward call that autograd runs as separate ops (SDPA's MATH path, attention
// written in plain ops: softmax(q kᵀ) v), assembled from tensor hooks: dO arrives on O first,
// then dQ/dK/dV on the inputs. Checked once every expected gradient was seen, together with the
// forward's tensors (held until then), so the record says whether its inputs were finite. The
// hooks only read, except where --inject asks for a gradient to be corrupted.
#pragma once

#include <functional>
#include <vector>

#include "base/records/roles.h"
#include "probes/core/call_identity.h"
#include "probes/libtorch/call_capture.h"

namespace nanprov::probes {

class CallRecorder;

struct WatchedGradient {
  Role role;          // kdO, kdQ, kdK or kdV
  at::Tensor tensor;  // the forward tensor autograd hands that gradient to; needs grad
  // The gradient as the call's record holds it (a view: [B·H, D, S] back to [B, H, S, D]);
  // empty when it comes as it is.
  std::function<at::Tensor(const at::Tensor&)> as_recorded;
};

// `fwd_tensors` are held detached until the backward is recorded by `recorder`; `desc` names the
// backward's op (its phase is taken as backward). `unattributed`: why a CUDA backward's kernels are
// not its own.
void watchBackward(CallRecorder& recorder, const CallName& fwd, const AttentionOp& desc, const RoleTensors& fwd_tensors,
                   const CallArgs& args, std::vector<WatchedGradient> watched, const char* unattributed);

}  // namespace nanprov::probes
