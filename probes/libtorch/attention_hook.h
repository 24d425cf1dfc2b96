// Installs the attention probes into the dispatcher. Narrow by design: only the ops of the role
// table are wrapped, so every other op of the training pays nothing (a global RecordFunction
// observer costs 1.16-1.20x on launch-bound steps, GPU.md). The wrappers are entry points: they
// find the process's probes and hand each call to its CallRecorder (call_recorder.h). What they
// know about the thread they run on is the thread's state, for the probes of other attention
// (probe_thread.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/records/roles.h"
#include "base/status.h"

namespace nanprov::probes {

// Idempotent. Wraps each op of attentionOps() present in this torch build at the
// BackendSelect key, and aten::scaled_dot_product_attention at the Autograd keys to see the
// MATH path, which has no fused op of its own. `install_others` installs the other probes
// (install_probes.h) at their place in the order, before SDPA's; `want_fused` unless
// NANPROV_HOOKS leaves the fused ops out.
Status installAttentionProbes(const std::function<void(bool want_fused)>& install_others);

// --probe-op: probes a dispatcher op outside the role table (a library's own attention op, e.g.
// mylib::attn) as a forward call of `backend`. Arguments get roles from `roles` (by
// schema argument name), else from the role table; O is the argument mapped to O (an out buffer
// the op fills), else the op's first result. Errors when the op is not registered (yet) or lacks
// Q, K or V. Idempotent per op.
Status probeOperator(const std::string& name, const std::vector<std::pair<std::string, Role>>& roles,
                     const std::string& backend);

}  // namespace nanprov::probes
