#include "probes/libtorch/softmax_attention.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/function.h>
#include <torch/library.h>

#include <cctype>
#include <string>
#include <string_view>

#include "probes/libtorch/call_recording.h"
#include "probes/libtorch/foreign_calls.h"
#include "probes/core/session.h"
#include "probes/libtorch/probes.h"

namespace nanprov {
namespace {

using torch::autograd::Node;

const c10::DispatchKeySet kBelowProbe(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);

bool named(const Node& node, std::string_view prefix) { return node.name().rfind(prefix, 0) == 0; }

// Nodes a score tensor passes through between its matmul and the softmax: scaling, a mask or
// bias added, softcapping, a dtype cast, views.
bool passesScores(const Node& node) {
  for (std::string_view p : {"MulBackward", "DivBackward", "AddBackward", "SubBackward", "ToCopyBackward",
                             "ViewBackward", "UnsafeViewBackward", "ReshapeAliasBackward", "MaskedFillBackward",
                             "WhereBackward", "CloneBackward", "TanhBackward", "ExpandBackward"}) {
    if (named(node, p)) return true;
  }
  return false;
}

// Nodes between an activation and the matmul that reads it: K's transpose, head reshapes.
bool isView(const Node& node) {
  for (std::string_view p : {"TransposeBackward", "TBackward", "PermuteBackward", "ViewBackward",
                             "UnsafeViewBackward", "ExpandBackward", "ReshapeAliasBackward", "CloneBackward"}) {
    if (named(node, p)) return true;
  }
  return false;
}

// An operand of the matmul is an activation unless it is a parameter (a leaf accumulating its
// gradient), seen through views: a weight matmul (a Linear's logits) is not attention.
bool isActivation(const torch::autograd::Edge& edge) {
  const Node* node = edge.function.get();
  for (int hops = 0; node && hops < 6 && isView(*node); ++hops) {
    if (node->next_edges().empty()) return false;
    node = node->next_edges()[0].function.get();
  }
  return node && !named(*node, "torch::autograd::AccumulateGrad");
}

bool isActivationMatmul(const Node& node) {
  const auto& edges = node.next_edges();
  if (named(node, "BmmBackward") || named(node, "MmBackward")) {
    return edges.size() >= 2 && isActivation(edges[0]) && isActivation(edges[1]);
  }
  if (named(node, "BaddbmmBackward")) {  // baddbmm(bias, q, kᵀ): nn.MultiheadAttention's scores
    return edges.size() >= 3 && isActivation(edges[1]) && isActivation(edges[2]);
  }
  return false;
}

// Whether `scores` was made by a matmul of two activations, within a few nodes up its history.
bool madeByActivationMatmul(const at::Tensor& scores) {
  const Node* frontier[8];
  int count = 0, visited = 0;
  if (Node* fn = scores.grad_fn().get()) frontier[count++] = fn;
  while (count > 0 && visited < 12) {
    const Node* node = frontier[--count];
    ++visited;
    if (isActivationMatmul(*node)) return true;
    if (!passesScores(*node)) continue;
    for (const auto& edge : node->next_edges()) {
      if (edge.function && count < 8) frontier[count++] = edge.function.get();
    }
  }
  return false;
}

// "layers.3.attn" → "layers.*.attn": one entry per module pattern, not per layer, and the
// --probe-module that checks them all.
std::string patternOf(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size();) {
    bool starts_part = i == 0 || path[i - 1] == '.';
    size_t j = i;
    while (j < path.size() && std::isdigit(static_cast<unsigned char>(path[j]))) ++j;
    if (starts_part && j > i && (j == path.size() || path[j] == '.')) {
      out += '*';
      i = j;
    } else {
      out += path[i++];
    }
  }
  return out;
}

void countIfAttention(const at::Tensor& x, int64_t dim) {
  if (!x.defined() || x.dim() < 3 || (dim != -1 && dim != x.dim() - 1) || !x.requires_grad()) return;
  if (!realTensor(x) || c10::impl::TorchDispatchModeTLS::any_modes_set() || !madeByActivationMatmul(x)) return;
  std::string pattern = patternOf(probes().session().modulePath());
  std::string what = pattern.empty() ? "attention-like softmax(q·kᵀ) outside any module: not checked"
                                     : "attention-like softmax(q·kᵀ) in " + pattern + ": not checked; --probe-module '" +
                                           pattern + "' checks it";
  probes().session().countUnprobed(what);
}

void softmaxKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  // _softmax(Tensor self, int dim, bool half_to_float)
  if (!insideAttentionCall() && !insideRecordedCall() && stack->size() >= 3 && probes().session().active()) {
    const c10::IValue& self = (*stack)[stack->size() - 3];
    const c10::IValue& dim = (*stack)[stack->size() - 2];
    if (self.isTensor() && dim.isInt()) {
      guarded("attention-like softmax count", [&] { countIfAttention(self.toTensor(), dim.toInt()); });
    }
  }
  handle.redispatchBoxed(ks & kBelowProbe, stack);
}

}  // namespace

void installSoftmaxAttentionCount() {
  if (!c10::Dispatcher::singleton().findSchema({"aten::_softmax", ""})) return;
  // Leaked on purpose, like the other probes' libraries: dropping one deregisters its kernel.
  auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
  lib->impl("_softmax", torch::CppFunction::makeFromBoxedFunction<&softmaxKernel>());
}

}  // namespace nanprov
