// GradientSentinel: at every optimizer step, one check of all gradients and of the parameters
// after the update. It finds NaN/Inf that start outside attention (a loss term, a regulariser,
// an optimizer) at their true step, so they are not first seen one step later as an attention
// input. The infinity norm of each tensor (one fused multi-tensor reduction; parameters spread
// over several devices are not checked yet) is
// non-finite exactly when the tensor holds NaN or Inf; on CUDA the norms come back through
// pinned memory and an event, read at later step boundaries: no host synchronisation.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace nanprov {

// Registers the op the bootstrap calls after each optimizer step:
//   torch.ops.nanprov.check_step(grads, params, names, step)
// `grads[i]` is the gradient of `params[i]`, named by line i of `names`; `step` is the step
// that produced the gradients.
void installGradientSentinel();

// Records finished checks; at exit (`wait`) waits for the last ones.
void pollGradientSentinel(bool wait);

}  // namespace nanprov
