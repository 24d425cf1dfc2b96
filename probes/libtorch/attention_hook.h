// Installs the attention probes into the dispatcher. Narrow by design: only the ops of the role
// table are wrapped, so every other op of the training pays nothing (a global RecordFunction
// observer costs 1.16-1.20x on launch-bound steps, GPU.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/records/roles.h"
#include "base/status.h"

namespace nanprov {

// Idempotent. Wraps each op of attentionOps() present in this torch build at the
// BackendSelect key, and aten::scaled_dot_product_attention at the Autograd keys to see the
// MATH path, which has no fused op of its own.
Status installAttentionProbes();

// Entering (mode 1: with gradients, 0: without) or leaving (-1) a torch.compile'd graph on this
// thread. Autograd runs a compiled training graph with gradients off, so inside one the grad
// mode of the code that called it says whether this is inference.
void setCompiledGradMode(int mode);

// --probe-op: probes a dispatcher op outside the role table (a library's own attention op, e.g.
// mylib::attn) as a forward call of `backend`. Arguments get roles from `roles` (by
// schema argument name), else from the role table; O is the argument mapped to O (an out buffer
// the op fills), else the op's first result. Errors when the op is not registered (yet) or lacks
// Q, K or V. Idempotent per op.
Status probeOperator(const std::string& name, const std::vector<std::pair<std::string, Role>>& roles,
                     const std::string& backend);

}  // namespace nanprov
