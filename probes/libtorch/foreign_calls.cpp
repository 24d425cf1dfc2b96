#include "probes/libtorch/foreign_calls.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/interned_text.h"
#include "base/log_once.h"
#include "base/wall_clock.h"
#include "probes/libtorch/call_recorder.h"
#include "probes/libtorch/guarded.h"
#include "probes/libtorch/probe_thread.h"
#include "probes/libtorch/probes.h"

namespace nanprov::probes {
namespace {

// A bracket's kernel trace, held by the bracket (probe_thread.h) until the call is recorded.
class TracedBracket final : public BracketTrace {
 public:
  TracedBracket(CallRecorder& recorder, const CallName& name) : trace_(recorder, name) {}
  const char* unattributed() const override { return trace_.unattributed(); }

 private:
  CallTrace trace_;
};

bool probing(Probes& p) { return !insideProbedOp() && p.session().active(); }

void beginCall(const at::Tensor& q, const std::optional<at::Tensor>& o, bool boundary) {
  OpenBracket open;
  open.boundary = boundary;
  if (Probes& p = processProbes(); probing(p)) {
    guarded("attention probe", [&] {
      CallRecorder& recorder = p.recorder();
      open.name = o ? recorder.nameBackward(reinterpret_cast<uintptr_t>(o->data_ptr())) : recorder.nameForward();
      open.start_ns = wallClockNs();
      if (q.is_cuda()) open.trace = std::make_unique<TracedBracket>(recorder, *open.name);
    });
  }
  openBrackets().push_back(std::move(open));
}

void abandonCall() {
  if (!openBrackets().empty()) openBrackets().pop_back();
}

// Whether the innermost bracket saw a call nanprov checked run inside it: a module probe then
// records nothing of its own, since the call inside has the real Q, K and V.
bool checkedInside() { return !openBrackets().empty() && openBrackets().back().checked_inside; }

// The name a finished call gets, and its timing and kernels: from its bracket when it had one,
// else named now by `name_now`.
template <typename NameNow>
CallEvent closeCall(CallRecorder& recorder, const AttentionOp& desc, NameNow&& name_now, const RoleTensors& outputs,
                    CallName* named) {
  std::optional<OpenBracket> open;
  if (std::vector<OpenBracket>& brackets = openBrackets(); !brackets.empty()) {
    open = std::move(brackets.back());
    brackets.pop_back();
  }
  bool bracketed = open && open->name;
  *named = bracketed ? *open->name : name_now();
  CallEvent rec = recorder.eventFor(*named, desc, desc.phase);
  rec.end_ns = wallClockNs();
  rec.start_ns = bracketed ? open->start_ns : rec.end_ns;
  if (bracketed && open->trace) rec.unattributed = open->trace->unattributed();
  else if (onCuda(outputs)) rec.unattributed = "the call's kernels ran outside a bracket nanprov could trace";
  return rec;
}

// The arguments replay reads: how the call scaled and masked, and how its tensors are laid out
// ("bhsd"; "bshd" for FlashAttention; "thd" for packed sequences with cu_seqlens).
// `kernel_backend`: FlexAttention's kernel_options["BACKEND"] ("TRITON", "FLASH"...), "" when unset.
CallArgs argsOf(std::optional<double> scale, bool is_causal, const std::string& layout,
                const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,
                const std::string& kernel_backend) {
  CallArgs args;
  args.emplace_back("scale", scale ? c10::IValue(*scale) : c10::IValue());
  args.emplace_back("is_causal", c10::IValue(is_causal));
  args.emplace_back("layout", c10::IValue(layout));
  if (cu_seqlens_q) args.emplace_back("cu_seqlens_q", *cu_seqlens_q);
  if (cu_seqlens_k) args.emplace_back("cu_seqlens_k", *cu_seqlens_k);
  if (!kernel_backend.empty()) args.emplace_back("kernel_backend", c10::IValue(kernel_backend));
  return args;
}

std::string shapeText(const at::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? "," : "") + std::to_string(t.size(d));
  return out + "]";
}

// Why a module's arguments are not one attention call's Q, K and V, as replay reads them ([batch,
// heads, seq, dim], heads first; K and V of one length; O [batch, heads, seq, V's dim]); "" when
// they are. A --probe-module whose module takes its hidden states ([B, S, E]) is checked at its
// boundary all the same, but replay could only refuse its capture: the report says so instead.
std::string notOneAttentionCall(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o) {
  for (const auto& [role, t] : {std::pair{"Q", &q}, std::pair{"K", &k}, std::pair{"V", &v}}) {
    if (t->dim() != 4) return std::string(role) + " is " + shapeText(*t) + ", not [batch, heads, seq, dim]";
  }
  const bool one_call = k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(3) == q.size(3) &&
                        v.size(1) == k.size(1) && v.size(2) == k.size(2) && k.size(1) > 0 &&
                        q.size(1) % k.size(1) == 0 && o.dim() == 4 && o.size(0) == q.size(0) &&
                        o.size(1) == q.size(1) && o.size(2) == q.size(2) && o.size(3) == v.size(3);
  if (one_call) return "";
  return "Q " + shapeText(q) + ", K " + shapeText(k) + ", V " + shapeText(v) + " and O " + shapeText(o) +
         " do not make one attention call";
}

void recordCall(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                const std::optional<at::Tensor>& bias, std::optional<double> scale, bool is_causal,
                const std::string& layout, const std::optional<at::Tensor>& cu_seqlens_q,
                const std::optional<at::Tensor>& cu_seqlens_k, const std::string& op, const std::string& backend,
                const std::string& note, const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& link,
                const std::string& kernel_backend, std::optional<double> dropout_p) {
  Probes& p = processProbes();
  if (!probing(p)) {
    WorkerCall counted(p.session());  // a DataLoader worker's: counted for its rank
    abandonCall();
    return;
  }
  guarded("attention probe", [&] {
    // Interned: the event outlives this call's strings.
    const AttentionOp desc = {internText(op), internText(backend), Phase::kForward, {Role::kO}};
    RoleTensors outputs = {{Role::kO, o}};
    CallRecorder& recorder = p.recorder();
    // Taken before closeCall ends the bracket: a module's boundary holds the scores seen inside it.
    const std::vector<OpenBracket>& brackets = openBrackets();
    at::Tensor scores = !brackets.empty() && brackets.back().boundary ? brackets.back().scores : at::Tensor();
    CallName name;
    CallEvent rec = closeCall(recorder, desc, [&recorder] { return recorder.nameForward(); }, outputs, &name);
    // For its backward: O's address, or that of the copy of O the call saved for it.
    recorder.link(name, reinterpret_cast<uintptr_t>((link ? *link : o).data_ptr()));
    countForeignCall();
    recorder.inject(rec, outputs);
    CallArgs args = argsOf(scale, is_causal, layout, cu_seqlens_q, cu_seqlens_k, kernel_backend);
    // The bias (FlexAttention's score_mod and block mask, materialised by the bootstrap) is
    // captured for replay, not judged as an input: the call itself made it.
    if (bias) args.emplace_back("mask", *bias);
    if (!note.empty()) args.emplace_back("note", c10::IValue(note));
    // A module's arguments (--probe-module) may be its hidden states: no capture replay could read.
    if (backend == "module") {
      if (std::string why = notOneAttentionCall(q, k, v, o); !why.empty()) {
        const std::string cls = op.rfind("module:", 0) == 0 ? op.substr(7) : op;
        const std::string text = "the module's arguments are not its Q, K and V (" + why +
                                 "); name them: --probe-module '" + cls + ":q=ARG,k=ARG,v=ARG'";
        logOnce(
            "unreplayable " + op,
            "--probe-module: " + op + " is checked at its boundary, but replay could not rebuild its calls: " + text);
        args.emplace_back("unreplayable", c10::IValue(text));
      }
    }
    // The probability the call applied (0 outside training), for its capture and the store.
    if (dropout_p) args.emplace_back("dropout_p", c10::IValue(*dropout_p));
    RoleTensors tensors = {{Role::kQ, q}, {Role::kK, k}, {Role::kV, v}};
    if (mask) tensors.emplace_back(Role::kMask, *mask);
    if (scores.defined()) tensors.emplace_back(Role::kS, scores);
    tensors.emplace_back(Role::kO, o);
    recorder.finish(std::move(rec), tensors, args);
  });
}

void recordBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                    const at::Tensor& grad_out, const std::optional<at::Tensor>& dq,
                    const std::optional<at::Tensor>& dk, const std::optional<at::Tensor>& dv,
                    std::optional<double> scale, bool is_causal, const std::string& layout,
                    const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,
                    const std::string& op, const std::string& backend, const std::optional<at::Tensor>& mask,
                    const std::string& kernel_backend) {
  Probes& p = processProbes();
  if (!probing(p)) {
    abandonCall();
    return;
  }
  guarded("attention probe", [&] {
    const AttentionOp desc = {internText(op), internText(backend), Phase::kBackward, {Role::kdQ, Role::kdK, Role::kdV}};
    RoleTensors outputs;
    for (const auto& [role, grad] : {std::pair{Role::kdQ, &dq}, std::pair{Role::kdK, &dk}, std::pair{Role::kdV, &dv}}) {
      if (*grad) outputs.emplace_back(role, **grad);
    }
    CallRecorder& recorder = p.recorder();
    CallName name;
    auto linked = [&] { return recorder.nameBackward(reinterpret_cast<uintptr_t>(o.data_ptr())); };
    CallEvent rec = closeCall(recorder, desc, linked, outputs, &name);
    recorder.inject(rec, outputs);
    RoleTensors inputs = {{Role::kQ, q}, {Role::kK, k}, {Role::kV, v}};
    if (mask) inputs.emplace_back(Role::kMask, *mask);
    inputs.insert(inputs.end(), {{Role::kO, o}, {Role::kdO, grad_out}});
    recorder.finish(std::move(rec), concat(std::move(inputs), outputs),
                    argsOf(scale, is_causal, layout, cu_seqlens_q, cu_seqlens_k, kernel_backend));
  });
}

// What the ops do on FakeTensors and meta tensors (torch.compile tracing them): nothing.
void beginCallMeta(const at::Tensor&, const std::optional<at::Tensor>&, bool) {}
void recordCallMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                    const std::optional<at::Tensor>&, std::optional<double>, bool, const std::string&,
                    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, const std::string&,
                    const std::string&, const std::string&, const std::optional<at::Tensor>&,
                    const std::optional<at::Tensor>&, const std::string&, std::optional<double>) {}
void recordBackwardMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                        const std::optional<at::Tensor>&, std::optional<double>, bool, const std::string&,
                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, const std::string&,
                        const std::string&, const std::optional<at::Tensor>&, const std::string&) {}

}  // namespace

void installForeignCallOps() {
  // Leaked on purpose, like the dispatcher probes' libraries: dropping one deregisters its ops.
  auto* defs = new torch::Library(torch::Library::FRAGMENT, "nanprov", std::nullopt, __FILE__, __LINE__);
  defs->def("begin_call(Tensor q, Tensor? o, bool boundary=False) -> ()");
  defs->def("checked_inside() -> bool");
  defs->def("abandon_call() -> ()");
  defs->def(
      "record_call(Tensor q, Tensor k, Tensor v, Tensor o, Tensor? bias, float? scale, bool is_causal, "
      "str layout, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, str op, str backend, str note, "
      "Tensor? mask=None, Tensor? link=None, str kernel_backend='', float? dropout_p=None) -> ()");
  defs->def(
      "record_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor grad_out, Tensor? dq, Tensor? dk, "
      "Tensor? dv, float? scale, bool is_causal, str layout, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
      "str op, str backend, Tensor? mask=None, str kernel_backend='') -> ()");
  for (auto key : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA}) {
    auto* impl = new torch::Library(torch::Library::IMPL, "nanprov", key, __FILE__, __LINE__);
    impl->impl("begin_call", &beginCall);
    impl->impl("record_call", &recordCall);
    impl->impl("record_backward", &recordBackward);
  }
  // abandon_call and checked_inside take no tensor to dispatch on.
  auto* any = new torch::Library(torch::Library::IMPL, "nanprov", c10::DispatchKey::CompositeExplicitAutograd, __FILE__,
                                 __LINE__);
  any->impl("abandon_call", &abandonCall);
  any->impl("checked_inside", &checkedInside);
  auto* meta = new torch::Library(torch::Library::IMPL, "nanprov", c10::DispatchKey::Meta, __FILE__, __LINE__);
  meta->impl("begin_call", &beginCallMeta);
  meta->impl("record_call", &recordCallMeta);
  meta->impl("record_backward", &recordBackwardMeta);
}

}  // namespace nanprov::probes
