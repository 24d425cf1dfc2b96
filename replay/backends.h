// Running a captured call again: through an SDPA backend by its own ATen op (forward, then its
// backward with the captured dO), through the low-precision yardstick, and through the float64
// reference. Every run starts from copies of the captured inputs; nothing is shared.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "replay/captured_call.h"
#include "replay/outputs.h"

namespace nanprov::replay {

// The backends replay runs by default on a device (their names: replay/backend_names.h).
std::vector<std::string> defaultBackends(const at::Device& device);

// Empty when `backend` accepts this call on `device`; else why not, in SDPA's words where it
// gave them (the same checks scaled_dot_product_attention runs before it picks a backend).
std::string refusal(const std::string& backend, const CapturedCall& call, const at::Device& device);

// Runs `backend`'s forward and, for a backward capture, its backward with the captured dO.
StatusOr<Outputs> runBackend(const std::string& backend, const CapturedCall& call, const at::Device& device);

// L: the same attention in the input's dtype with the operations reordered (FlashAttention's
// reorder_ops: K is scaled instead of Q), softmax in float32. Its error bounds what a correct
// low-precision kernel may be off by.
Outputs runYardstick(const CapturedCall& call, const at::Device& device);

// A backward's second yardstick: the gradients in the order FlashAttention-style kernels (cuDNN,
// flash, efficient, FA2/3/4, FlexAttention) compute them, from a right O stored in the input dtype
// (`reference_o`, G's, rounded) and the scores recomputed: P = exp(S − lse), dS = P ∘ (dO·Vᵀ −
// rowsum(dO ∘ O)) in float32, dS and P rounded to the input dtype before their products. Empty for
// a forward.
Outputs runFlashOrderedYardstick(const CapturedCall& call, const at::Tensor& reference_o, const at::Device& device);

// G: the float64 reference (replay/reference_blocks), on the GPU when `on_cuda` and one is here,
// else on the CPU; host tensors. *where says which device ran it.
StatusOr<Outputs> runReference(const CapturedCall& call, bool on_cuda, std::string* where);

// The captured outputs themselves, in the comparison's layouts.
Outputs capturedOutputs(const CapturedCall& call);
// O and LSE as captured: a forward's outputs, or what a backward received from its forward.
Outputs forwardOutputsIn(const CapturedCall& call);

}  // namespace nanprov::replay
