// GradientSentinel: at every optimizer step, one check of all gradients and of the parameters
// after the update. It finds NaN/Inf that start outside attention (a loss term, a regulariser,
// an optimizer) at their true step, so they are not first seen one step later as an attention
// input.
//
// The bootstrap hands each optimizer's parameters over once (watch_parameters), so a step costs
// Python one call with two integers. On CUDA the tensors are read by the attention checks' own
// fused kernel (DeviceChecks::measure), twelve to a launch, and the counts come back through the
// same mapped results at later step boundaries: no host synchronisation, no copy, no event. On the
// CPU one multi-tensor infinity norm per step (non-finite exactly when the tensor holds NaN or Inf).
#pragma once

namespace nanprov {

// Registers the ops the bootstrap calls:
//   torch.ops.nanprov.watch_parameters(key, params, names): the parameters an optimizer steps,
//     `names` one line per parameter; replaces what `key` (the optimizer's id) watched before;
//   torch.ops.nanprov.check_step(key, step) -> bool: checks their gradients and values after
//     `step` (the step that produced the gradients). False when `key` is not watched (never
//     was, or forgotten to bound memory): the bootstrap then watches it again.
void installGradientSentinel();

}  // namespace nanprov
