#include "probes/libtorch/softmax_attention.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/library.h>

#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/wall_clock.h"
#include "probes/core/session.h"
#include "probes/libtorch/backward_watch.h"
#include "probes/libtorch/call_recorder.h"
#include "probes/libtorch/guarded.h"
#include "probes/libtorch/output_history.h"
#include "probes/libtorch/probe_thread.h"
#include "probes/libtorch/probes.h"
#include "probes/libtorch/score_layout.h"

namespace nanprov::probes {
namespace {

using torch::autograd::Node;
using Stack = torch::jit::Stack;

const c10::DispatchKeySet kBelowProbe(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);
const AttentionOp kSoftmaxAttentionOp = {"softmax_attention", "plain_softmax", Phase::kForward, {Role::kO}};
constexpr const char* kSeparateOps =
    "attention written in plain ops runs as separate ops; its kernels are not one call's";
constexpr const char* kNoEnd = "its probabilities went to no matmul nanprov saw";
constexpr const char* kChangedProbabilities =
    "the probabilities were changed between the softmax and the matmul with V (dropout?), which replay does not model";

bool named(const Node& node, std::string_view prefix) { return node.name().rfind(prefix, 0) == 0; }

// Nodes that only rearrange a tensor's elements: K's transpose, head reshapes, einsum's
// permutes and views of its operands and of its product.
bool isView(const Node& node) {
  for (std::string_view p : {"TransposeBackward", "TBackward", "PermuteBackward", "ViewBackward", "UnsafeViewBackward",
                             "ExpandBackward", "ReshapeAliasBackward", "CloneBackward", "SqueezeBackward",
                             "UnsqueezeBackward", "AsStridedBackward", "AliasBackward"}) {
    if (named(node, p)) return true;
  }
  return false;
}

// Nodes a score tensor passes through between its matmul and the softmax: any rearrangement, and
// the elementwise ops attention puts there (scaling, a mask or bias added, softcapping, clamping,
// a dtype cast, an in-place op on a view of the product).
bool passesScores(const Node& node) {
  if (isView(node)) return true;
  for (std::string_view p : {"MulBackward", "DivBackward", "AddBackward", "SubBackward", "NegBackward",
                             "ToCopyBackward", "MaskedFillBackward", "WhereBackward", "TanhBackward", "ClampBackward",
                             "ClampMinBackward", "ClampMaxBackward", "CopySlices"}) {
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
  while (count > 0 && visited < 16) {
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

// A parameter (a leaf that accumulates its gradient), seen through views: a matmul with a weight
// is a layer, not attention's scores. Without gradients it is the only test there is.
bool isParameter(const at::Tensor& t) {
  if (!t.requires_grad()) return false;  // a view of a parameter needs its gradient too
  if (t.is_view() && t._base().defined()) return t._base().is_leaf();
  return t.is_leaf();
}

// `module`: where the softmax ran (the module path then), not where the count is made: a call
// whose end never came is counted at the next matmul or at the step's end, in another module.
void countUnchecked(Session& session, const std::string& module, std::string_view why) {
  std::string pattern = patternOf(module);
  std::string what = pattern.empty() ? "attention-like softmax(q·kᵀ) outside any module: not checked"
                                     : "attention-like softmax(q·kᵀ) in " + pattern + ": not checked";
  if (!why.empty()) what += " (" + std::string(why) + ")";
  // The suggestion ends the line: the report reads it off there (report/unchecked_attention.h).
  if (!pattern.empty()) what += "; --probe-module '" + pattern + "' checks it";
  session.countUnprobed(what);
}

// Counted as before, where this thread saw no matmul that made the scores (or could not place its
// product in them): a softmax over any dim of a tensor of 3 or more dims whose autograd history
// shows a matmul of activations.
void countIfAttention(Session& session, const at::Tensor& x) {
  if (!x.defined() || x.dim() < 3 || !x.requires_grad()) return;
  if (!realTensor(x) || c10::impl::TorchDispatchModeTLS::any_modes_set() || !madeByActivationMatmul(x)) return;
  countUnchecked(session, session.modulePath(), "");
}

// What this thread ran of one hand-written call so far.
struct PartialCall {
  // The last matmul of two 3-d tensors, as it got them: A [n, rows, d] and B [n, d, keys].
  at::Tensor a, b;
  int64_t n = 0, rows = 0, keys = 0;
  std::optional<double> alpha;  // baddbmm's factor on the product
  bool baddbmm = false;
  int64_t start_ns = 0;
  // Set by a softmax over that product: S as the softmax got it, P as it gave it, and where the
  // product's [n, rows, keys] sits in them.
  at::Tensor s, p;
  ProductLayout layout;
  std::string module;  // the module path at the softmax

  bool scoresSeen() const { return p.defined(); }
  void forget() {
    a = b = s = p = at::Tensor();
    alpha.reset();
  }
};

thread_local PartialCall t_call;

// Whether an op on this thread may belong to a hand-written call nanprov should check: not inside
// attention it already probes, nor in autograd's backward (which runs its matmuls with gradients
// off; a checkpoint's recompute runs the forward with them on).
bool watching(const Session& session) {
  if (!session.active() || insideAttentionCall() || insideRecordedCall()) return false;
  if (c10::impl::TorchDispatchModeTLS::any_modes_set()) return false;  // FakeTensors: torch.compile tracing
  return at::GradMode::is_enabled() || torch::autograd::get_current_graph_task_id() == -1;
}

// Where the last matmul's product sits in `x`, about to be softmaxed over `dim`, if `x` holds its
// scores: the product laid out in it (score_layout.h), the softmax over its keys.
std::optional<ProductLayout> scoresOfLastMatmul(const at::Tensor& x, int64_t dim) {
  const PartialCall& c = t_call;
  if (!c.a.defined() || x.dim() < 2 || c10::impl::TorchDispatchModeTLS::any_modes_set()) return std::nullopt;
  std::optional<ProductLayout> layout = productLayout(x, dim, c.n, c.rows, c.keys);
  if (!layout || !realTensor(x) || !realTensor(c.a) || !realTensor(c.b)) return std::nullopt;
  // With gradients the scores' history must show the matmul of two activations.
  if (x.requires_grad() ? !madeByActivationMatmul(x) : isParameter(c.a) || isParameter(c.b)) return std::nullopt;
  return layout;
}

// Whether a matmul of `a` with `b` reads the probabilities of the scores seen, in the product's
// order [n, rows, keys]: P itself seen through views, or what dropout or a dtype cast made of it,
// times V [n, keys, dv].
bool readsProbabilities(const PartialCall& c, const at::Tensor& a, const at::Tensor& b) {
  if (!realTensor(a) || !realTensor(b) || a.sizes() != c10::IntArrayRef{c.n, c.rows, c.keys} || b.size(0) != c.n ||
      b.size(1) != c.keys) {
    return false;
  }
  if (!a.is_alias_of(c.p)) return true;
  // A view of P: its elements where the product's order puts them (a matmul over another order,
  // say P's heads taken as its batch the other way round, is not this call's).
  const at::Tensor ordered = inProductOrder(c.p, c.layout, c.n, c.rows, c.keys);
  return !ordered.is_alias_of(c.p) ||
         (ordered.strides() == a.strides() && ordered.storage_offset() == a.storage_offset());
}

// Records the call the probabilities read by `read` and `v` ended, as attention's roles in
// [batch, heads, seq, dim]: every role in the matmuls' order (Q and K as the first read them, V and
// O as the second did, S and P in the product's order), n split into batch and heads as the scores'
// dims say (score_layout.h).
void recordCall(CallRecorder& recorder, const PartialCall& c, const at::Tensor& read, const at::Tensor& v,
                const at::Tensor& o) {
  const int64_t n = c.n, rows = c.rows, width = c.a.size(2), keys = c.keys, v_width = v.size(2);
  const int64_t batch = c.layout.batch, heads = n / batch;
  auto bhsd = [=](const at::Tensor& t, int64_t seq, int64_t w) { return t.reshape({batch, heads, seq, w}); };
  const at::Tensor q = bhsd(c.a, rows, width), k = bhsd(c.b.transpose(1, 2), keys, width);
  const at::Tensor vv = bhsd(v, keys, v_width), out = bhsd(o, rows, v_width);
  const at::Tensor s = bhsd(inProductOrder(c.s, c.layout, n, rows, keys), rows, keys);
  const at::Tensor p = bhsd(inProductOrder(c.p, c.layout, n, rows, keys), rows, keys);

  CallName name = recorder.nameForward(c.a);
  CallEvent rec = recorder.eventFor(name, kSoftmaxAttentionOp, Phase::kForward);
  rec.start_ns = c.start_ns;
  rec.end_ns = wallClockNs();
  if (o.is_cuda()) rec.unattributed = kSeparateOps;
  recorder.inject(rec, {{Role::kO, out}});
  // The scale on the product is baddbmm's alpha, else unknown here: replay reads it, and the
  // bias, from S (replay/score_bias.h).
  CallArgs args;
  args.emplace_back("scale", c.alpha ? c10::IValue(*c.alpha) : c10::IValue());
  args.emplace_back("is_causal", c10::IValue(false));
  args.emplace_back("layout", c10::IValue(std::string("bhsd")));
  args.emplace_back("scores_by", c10::IValue(std::string(c.baddbmm ? "baddbmm" : "matmul")));
  // A cast (diffusers' upcast softmax) keeps the values; anything else in the same dtype changed them.
  if (!read.is_alias_of(c.p) && read.scalar_type() == c.p.scalar_type()) {
    args.emplace_back("note", c10::IValue(std::string(kChangedProbabilities)));
  }
  // O is given its history by autograd after this kernel returns: its backward is watched from
  // the end of this op (output_history.h, armed at the softmax).
  if (at::GradMode::is_enabled() && (read.requires_grad() || v.requires_grad())) {
    std::vector<WatchedGradient> watched;
    if (c.a.requires_grad())
      watched.push_back({Role::kdQ, c.a, [=](const at::Tensor& g) { return bhsd(g, rows, width); }});
    if (c.b.requires_grad() && !c.b.is_same(c.a)) {
      watched.push_back({Role::kdK, c.b, [=](const at::Tensor& g) { return bhsd(g.transpose(1, 2), keys, width); }});
    }
    if (v.requires_grad() && !v.is_same(c.a) && !v.is_same(c.b)) {
      watched.push_back({Role::kdV, v, [=](const at::Tensor& g) { return bhsd(g, keys, v_width); }});
    }
    // P, not S, goes with the backward: autograd holds P for the softmax's backward anyway, and
    // replay reads the bias from it as well as from S.
    RoleTensors held = {{Role::kQ, q}, {Role::kK, k}, {Role::kV, vv}, {Role::kP, p}, {Role::kO, out}};
    CallRecorder* recording = &recorder;  // the process's, never destroyed
    whenOutputHasHistory(o, [=, watched = std::move(watched)](const at::Tensor& o_with_history) mutable {
      watched.insert(watched.begin(),
                     {Role::kdO, o_with_history, [=](const at::Tensor& g) { return bhsd(g, rows, v_width); }});
      watchBackward(*recording, name, kSoftmaxAttentionOp, held, args, std::move(watched), kSeparateOps);
    });
  }
  recorder.finish(std::move(rec),
                  {{Role::kQ, q}, {Role::kK, k}, {Role::kV, vv}, {Role::kS, s}, {Role::kP, p}, {Role::kO, out}}, args);
}

// After a matmul of `a` with `b` gave `out`: the end of a call whose probabilities it reads, or the
// scores of the next one.
void afterMatmul(Probes& p, const at::Tensor& a, const at::Tensor& b, std::optional<double> alpha, bool baddbmm,
                 int64_t start, const at::Tensor& out) {
  PartialCall& c = t_call;
  if (c.scoresSeen()) {
    // Taken off the thread first: naming the call may begin the next inference forward pass,
    // whose step boundary forgets what this thread saw (forgetSoftmaxAttention).
    PartialCall seen = std::move(c);
    c.forget();
    if (readsProbabilities(seen, a, b)) {
      guarded("softmax attention probe", [&] { recordCall(p.recorder(), seen, a, b, out); });
      disarmOutputHistoryIfIdle();  // a record that failed left nothing to wait for
      return;
    }
    countUnchecked(p.session(), seen.module, kNoEnd);
    disarmOutputHistory();
  }
  c.a = a;
  c.b = b;
  c.n = a.size(0);
  c.rows = a.size(1);
  c.keys = b.size(2);
  c.alpha = alpha;
  c.baddbmm = baddbmm;
  c.start_ns = start;
}

// bmm(self, mat2) and baddbmm(self, batch1, batch2, *, beta, alpha).
template <bool kBaddbmm>
void matmulKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  Probes& p = processProbes();
  if (!watching(p.session())) return handle.redispatchBoxed(ks & kBelowProbe, stack);
  constexpr std::ptrdiff_t kArgs = kBaddbmm ? 5 : 2;
  auto first = stack->end() - kArgs;
  at::Tensor a = first[kBaddbmm ? 1 : 0].toTensor(), b = first[kBaddbmm ? 2 : 1].toTensor();
  std::optional<double> alpha;
  if (kBaddbmm && first[4].isScalar()) alpha = first[4].toScalar().toDouble();
  const int64_t start = wallClockNs();
  handle.redispatchBoxed(ks & kBelowProbe, stack);
  if (a.dim() != 3 || b.dim() != 3 || !stack->back().isTensor()) return;
  guarded("softmax attention probe", [&] { afterMatmul(p, a, b, alpha, kBaddbmm, start, stack->back().toTensor()); });
}

void softmaxKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  // _softmax(Tensor self, int dim, bool half_to_float)
  Session& session = processProbes().session();
  if (!watching(session) || stack->size() < 3) return handle.redispatchBoxed(ks & kBelowProbe, stack);
  const c10::IValue& self = (*stack)[stack->size() - 3];
  const c10::IValue& dim = (*stack)[stack->size() - 2];
  if (!self.isTensor() || !dim.isInt()) return handle.redispatchBoxed(ks & kBelowProbe, stack);
  const at::Tensor x = self.toTensor();
  noteSoftmaxInside(x);  // a --probe-module boundary's logits (probe_thread.h)
  std::optional<ProductLayout> layout;
  guarded("softmax attention probe", [&] {
    if (t_call.scoresSeen()) countUnchecked(session, t_call.module, kNoEnd);
    if (!t_call.scoresSeen()) layout = scoresOfLastMatmul(x, dim.toInt());
    if (!layout) {
      if (t_call.scoresSeen()) disarmOutputHistory();
      t_call.forget();
      countIfAttention(session, x);
    }
  });
  handle.redispatchBoxed(ks & kBelowProbe, stack);
  if (layout && stack->back().isTensor()) {
    t_call.s = x;
    t_call.p = stack->back().toTensor();
    t_call.layout = std::move(*layout);
    guarded("softmax attention probe", [&] { t_call.module = session.modulePath(); });
    if (x.requires_grad()) guarded("softmax attention probe", [] { armOutputHistory(); });
  }
}

}  // namespace

void installSoftmaxAttentionProbe() {
  auto& dispatcher = c10::Dispatcher::singleton();
  if (!dispatcher.findSchema({"aten::_softmax", ""}) || !dispatcher.findSchema({"aten::bmm", ""}) ||
      !dispatcher.findSchema({"aten::baddbmm", ""})) {
    return;
  }
  // Leaked on purpose, like the other probes' libraries: dropping one deregisters its kernels.
  auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
  lib->impl("_softmax", torch::CppFunction::makeFromBoxedFunction<&softmaxKernel>());
  lib->impl("bmm", torch::CppFunction::makeFromBoxedFunction<&matmulKernel<false>>());
  lib->impl("baddbmm", torch::CppFunction::makeFromBoxedFunction<&matmulKernel<true>>());
}

void forgetSoftmaxAttention(Session& session) {
  if (t_call.scoresSeen()) {
    guarded("softmax attention probe", [&] { countUnchecked(session, t_call.module, kNoEnd); });
  }
  disarmOutputHistory();
  t_call.forget();
}

namespace {
// Forgotten at every step boundary (probe_thread.h: endStepOnThread), from when the library loads.
const bool kForgottenAtStepBoundary = (forgetAtStepBoundary(&forgetSoftmaxAttention), true);
}  // namespace

}  // namespace nanprov::probes
