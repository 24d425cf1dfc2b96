#include "probes/libtorch/attention_hook.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "base/records/roles.h"
#include "base/wall_clock.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"
#include "probes/libtorch/backward_watch.h"
#include "probes/libtorch/call_recorder.h"
#include "probes/libtorch/guarded.h"
#include "probes/libtorch/padded_lse.h"
#include "probes/libtorch/probe_thread.h"
#include "probes/libtorch/probed_op.h"
#include "probes/libtorch/probes.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {
namespace {

// Why BackendSelect: it is in every dispatch (c10's default included set), it sits right above
// the backend kernel and below autograd, Python subclasses and functionalization, and only
// factory ops have kernels there. So the wrapper sees exactly the tensors the kernel saw and
// produced, forward and backward alike. (ADInplaceOrView, the obvious choice, is skipped by the
// autograd kernels of ops that neither view nor mutate, such as every *_backward op.)
const c10::DispatchKeySet kBelowProbe(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);
using Stack = torch::jit::Stack;
using Tensors = RoleTensors;

// Filled once by installAttentionProbes(), read-only afterwards. By handle: a probed call finds
// its op by a pointer compare over a few entries, not by hashing its name.
std::vector<std::pair<c10::OperatorHandle, ProbedOp>>* g_probed = nullptr;
ProbedOp* g_sdpa = nullptr;
ProbedOp* g_native_mha = nullptr;
// aten::_fused_sdp_choice: which backend SDPA is about to use. Lets a MATH call on CUDA be named
// (and its kernels traced) before it runs. nullptr when this torch lacks it.
std::optional<c10::OperatorHandle>* g_sdp_choice = nullptr;
const AttentionOp kMathOp = {"aten::_scaled_dot_product_attention_math", "math", Phase::kForward, {Role::kO}};
// PyTorch's fast path (nn.MultiheadAttention and nn.TransformerEncoderLayer in inference): Q, K
// and V are the op's inputs before its own in-projection, O its output after the out-projection.
const AttentionOp kNativeMhaOp = {"aten::_native_multi_head_attention", "native_mha", Phase::kForward, {Role::kO}};

// Fused calls probed on this thread; tells the SDPA wrapper whether a fused backend ran.
thread_local int64_t t_fused_calls = 0;

// The op itself, below the probes: its time is in no stage of probe_cost.
void runOp(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  InsideProbedOp depth;
  ProbeCost::Scope op(ProbeStage::kTheOp);
  handle.redispatchBoxed(ks & kBelowProbe, stack);
}

// The caller opened a kDispatching scope: everything here that no other stage claims is that.
void probeFusedCall(const ProbedOp* probed, const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  Probes& p = processProbes();
  if (probed && (insideProbedOp() || !p.session().active() || !probeable(*stack, probed->num_arguments)))
    probed = nullptr;
  if (!probed) {
    WorkerCall counted(p.session());
    ProbeCost::Scope op(ProbeStage::kTheOp);
    handle.redispatchBoxed(ks & kBelowProbe, stack);
    return;
  }
  ++t_fused_calls;
  const AttentionOp& desc = *probed->desc;
  Tensors inputs = probed->takeInputs(*stack);
  unpadLse(*probed->desc, inputs, inputs);  // a backward's LSE input
  CallArgs args = probed->takeArgs(*stack);
  CallRecorder& recorder = p.recorder();
  const bool forward = desc.phase == Phase::kForward;
  // On CUDA a call is named before it runs, so its kernels are traced under its name. On the
  // CPU, and on CUDA once the trace window is over, there is nothing to trace: a forward is
  // named after it ran, with its output's address for its backward, under one lock. Nothing
  // here may reach the op: on any failure the op runs unprobed.
  const bool cuda = onCuda(inputs);
  const bool traced = cuda && recorder.tracing();
  const bool name_first = traced || !forward;
  CallName name;
  std::optional<CallTrace> trace;
  bool named = !name_first;
  if (name_first) {
    guarded("attention probe", [&] {
      {
        ProbeCost::Scope cost(ProbeStage::kNaming);
        name = forward ? recorder.nameForward(tensorOf(inputs, Role::kQ))
                       : recorder.nameBackward(addressOf(inputs, Role::kO));
      }
      ProbeCost::Scope cost(ProbeStage::kTracing);
      if (traced) trace.emplace(recorder, name);
      named = true;
    });
  }
  if (!named) {
    runOp(handle, ks, stack);
    return;
  }
  int64_t start = wallClockNs();
  runOp(handle, ks, stack);
  int64_t end = wallClockNs();
  // A CUDA call past the trace window keeps the reason its kernels are not attributed.
  const char* unattributed = cuda && !traced ? recorder.untracedReason() : "";
  if (trace) {
    ProbeCost::Scope cost(ProbeStage::kTracing);
    unattributed = trace->unattributed();
    trace.reset();  // the check below is nanprov's own kernel, not the call's
  }
  guarded("attention probe", [&] {
    Tensors outputs;
    {
      ProbeCost::Scope cost(ProbeStage::kDescribing);
      outputs = takeOutputs(desc, *stack, handle.schema().returns().size());
      unpadLse(desc, inputs, outputs);
    }
    if (forward) {
      ProbeCost::Scope cost(ProbeStage::kNaming);
      uintptr_t link = addressOf(outputs, Role::kO);
      if (name_first) recorder.link(name, link);
      else name = recorder.nameForward(tensorOf(inputs, Role::kQ), link);
    }
    ProbeCost::Scope cost(ProbeStage::kDescribing);
    CallEvent rec = recorder.eventFor(name, desc, desc.phase);
    rec.start_ns = start;
    rec.end_ns = end;
    rec.unattributed = unattributed;
    recorder.inject(rec, outputs);
    recorder.finish(std::move(rec), concat(std::move(inputs), outputs), args);
  });
}

void fusedKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  ProbeCost::Scope dispatching(ProbeStage::kDispatching);
  const ProbedOp* probed = nullptr;
  for (const auto& [h, op] : *g_probed) {
    if (h == handle) {
      probed = &op;
      break;
    }
  }
  probeFusedCall(probed, handle, ks, stack);
}

// An op named by --probe-op: probed as the fused SDPA ops are, with its own role map.
class OperatorProbe : public c10::OperatorKernel {
 public:
  explicit OperatorProbe(ProbedOp probed) : probed_(std::move(probed)) {}
  void operator()(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
    ProbeCost::Scope dispatching(ProbeStage::kDispatching);
    probeFusedCall(&probed_, handle, ks, stack);
  }

 private:
  ProbedOp probed_;
};

// PyTorch's fast-path attention op. Where it runs SDPA inside (CUDA, head_dim % 8 == 0) the fused
// op underneath is probed with the projected Q, K, V and nothing more is recorded; where it
// computes attention itself (bmm, masked softmax: the CPU), the op is recorded as one call with
// its own inputs and output, and its projection weights as arguments.
void nativeMhaKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  ProbeCost::Scope dispatching(ProbeStage::kDispatching);
  Probes& p = processProbes();
  if (insideProbedOp() || !p.session().active() || !probeable(*stack, g_native_mha->num_arguments)) {
    WorkerCall counted(p.session());
    ProbeCost::Scope op(ProbeStage::kTheOp);
    handle.redispatchBoxed(ks & kBelowProbe, stack);
    return;
  }
  Tensors inputs = g_native_mha->takeInputs(*stack);
  CallArgs args = g_native_mha->takeArgs(*stack);
  int64_t fused_before = t_fused_calls;
  int64_t start = wallClockNs();
  {
    ProbeCost::Scope op(ProbeStage::kTheOp);  // not runOp: the fused op underneath is probed (no depth guard)
    handle.redispatchBoxed(ks & kBelowProbe, stack);
  }
  int64_t end = wallClockNs();
  if (t_fused_calls != fused_before) return;  // checked underneath, as SDPA
  ++t_fused_calls;                            // an enclosing encoder-layer op ran checked attention
  guarded("fast-path attention probe", [&] {
    Tensors outputs = takeOutputs(kNativeMhaOp, *stack, handle.schema().returns().size());
    CallRecorder& recorder = p.recorder();
    CallEvent rec = recorder.eventFor(recorder.nameForward(tensorOf(inputs, Role::kQ)), kNativeMhaOp, Phase::kForward);
    rec.start_ns = start;
    rec.end_ns = end;
    if (onCuda(inputs)) rec.unattributed = "the fast-path op ran its own kernels outside a traced call";
    recorder.inject(rec, outputs);
    recorder.finish(std::move(rec), concat(std::move(inputs), outputs), args);
  });
}

// Attention nanprov recognises but cannot check: counted, so a run that only ran these is never
// reported clean. An encoder-layer fast path whose attention was checked inside (the MHA op
// above, or SDPA) counts nothing.
thread_local int t_unprobed_depth = 0;  // the encoder-layer op runs the attention op inside

void unprobedKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  int64_t fused_before = t_fused_calls;
  Session& session = processProbes().session();
  bool count = !insideProbedOp() && t_unprobed_depth == 0 && session.active() &&
               probeable(*stack, handle.schema().arguments().size());
  ++t_unprobed_depth;
  try {
    WorkerCall counted(session);
    handle.redispatchBoxed(ks & kBelowProbe, stack);
  } catch (...) {
    --t_unprobed_depth;
    throw;
  }
  --t_unprobed_depth;
  if (count && t_fused_calls == fused_before) {
    guarded("unprobed attention count", [&] { session.countUnprobed(handle.schema().name()); });
  }
}

// The MATH path's backward runs as separate autograd ops: assembled from tensor hooks on O and
// the inputs (backward_watch.h).
void watchMathBackward(CallRecorder& recorder, const CallName& fwd, const Tensors& inputs, const CallArgs& args,
                       const at::Tensor& out) {
  if (!out.requires_grad()) return;
  std::vector<WatchedGradient> watched = {{Role::kdO, out, {}}};
  for (const auto& [role, t] : inputs) {
    if (t.requires_grad() && role != Role::kMask) {
      watched.push_back({role == Role::kQ ? Role::kdQ : role == Role::kK ? Role::kdK : Role::kdV, t, {}});
    }
  }
  watchBackward(recorder, fwd, kMathOp, concat(inputs, {{Role::kO, out}}), args, std::move(watched),
                "the MATH backward runs as separate autograd ops; its kernels are not one call's");
}

// True when SDPA is about to take the MATH path on CUDA for the arguments on `stack`.
bool mathOnCuda(const Stack& stack) {
  if (!g_sdp_choice || !*g_sdp_choice) return false;
  const c10::OperatorHandle& choice = **g_sdp_choice;
  size_t n = choice.schema().arguments().size();
  if (n != g_sdpa->num_arguments) return false;
  // The arguments are copied into this thread's own stack, whose capacity stays: a new one per
  // call would be the probe's only heap allocation in steady state (issue 26). A choice that
  // reaches SDPA again on this thread (a Python dispatch mode) gets a stack of its own.
  thread_local Stack reused;
  thread_local bool in_use = false;
  Stack own;
  Stack& args = in_use ? own : reused;
  struct Lent {  // holds no tensor past the call, even when the choice throws
    Stack& args;
    bool& in_use;
    bool was;
    ~Lent() { args.clear(), in_use = was; }
  } lent{args, in_use, in_use};
  in_use = true;
  args.assign(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
  choice.callBoxed(&args);
  return !args.empty() && args.back().isInt() && args.back().toInt() == 0;  // sdp::SDPBackend::math
}

// SDPA is CompositeImplicitAutograd: without nanprov it decomposes at the autograd key, and the
// keys between autograd and the backend (Python modes, functionalization) never see it whole.
// Handing it to the backend key runs that same composite kernel, so its inner ops are recorded
// by autograd and traced as they would be. Redispatching to the next key instead
// (after_autograd_keyset) gives the whole op to a tracing mode, which records it without a
// backward: torch.compile then trains attention with no gradient at all.
void runCompositeSdpa(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  InsideSdpa in_sdpa;
  handle.redispatchBoxed(ks & kBelowProbe, stack);
}

void sdpaKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  Probes& p = processProbes();
  if (insideProbedOp() || !p.session().active() || !probeable(*stack, g_sdpa->num_arguments)) {
    WorkerCall counted(p.session());
    runCompositeSdpa(handle, ks, stack);
    return;
  }
  Tensors inputs = g_sdpa->takeInputs(*stack);
  CallArgs args = g_sdpa->takeArgs(*stack);
  CallRecorder& recorder = p.recorder();
  // On CUDA, while kernels are traced, a MATH call is named first, so its kernels are traced
  // under its name; elsewhere (the CPU, past the trace window, or a fused backend probed
  // underneath) it is named after it ran, if it was MATH at all. Asking SDPA for its backend is
  // a second run of its whole selection, so it is asked only while the answer is needed.
  std::optional<CallName> name;
  std::optional<CallTrace> trace;
  const bool cuda = onCuda(inputs);
  if (cuda && recorder.tracing()) {
    guarded("math attention probe", [&] {
      if (!mathOnCuda(*stack)) return;
      name = recorder.nameForward(tensorOf(inputs, Role::kQ));
      trace.emplace(recorder, *name);
    });
  }
  int64_t fused_before = t_fused_calls;
  int64_t start = wallClockNs();
  runCompositeSdpa(handle, ks, stack);
  int64_t end = wallClockNs();
  const char* unattributed = trace ? trace->unattributed() : cuda ? recorder.untracedReason() : "";
  trace.reset();
  if (t_fused_calls != fused_before) return;  // a fused backend was probed underneath
  guarded("math attention probe", [&] {
    at::Tensor out = stack->back().toTensor();
    if (!name) name = recorder.nameForward(tensorOf(inputs, Role::kQ));
    CallEvent rec = recorder.eventFor(*name, kMathOp, Phase::kForward);
    rec.start_ns = start;
    rec.end_ns = end;
    rec.unattributed = unattributed;
    recorder.inject(rec, {{Role::kO, out}});
    watchMathBackward(recorder, *name, inputs, args, out);
    recorder.finish(std::move(rec), concat(inputs, {{Role::kO, out}}), args);
  });
}

}  // namespace

Status installAttentionProbes(const std::function<void(bool want_fused)>& install_others) {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [&] {
    try {
      auto& dispatcher = c10::Dispatcher::singleton();
      // NANPROV_HOOKS=fused|sdpa narrows what is wrapped, to bisect a misbehaving torch build.
      const char* hooks_env = std::getenv("NANPROV_HOOKS");
      std::string hooks = hooks_env && *hooks_env ? hooks_env : "fused,sdpa";
      bool want_fused = hooks.find("fused") != std::string::npos;
      bool want_sdpa = hooks.find("sdpa") != std::string::npos;
      g_probed = new std::vector<std::pair<c10::OperatorHandle, ProbedOp>>();
      // Its full size now: a kernel registered below may run (on another thread) while the rest
      // are added, and a reallocation would move the entries under it.
      g_probed->reserve(attentionOps().size());
      auto* fused =
          new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
      for (const AttentionOp& desc : attentionOps()) {
        auto handle = dispatcher.findSchema({desc.name, ""});
        if (!handle || !want_fused) continue;  // not in this torch build, or not wanted
        g_probed->emplace_back(*handle, ProbedOp::resolve(*handle, &desc));
        g_probed->back().second.offerReruns(*handle);
        std::string bare = std::string(desc.name).substr(6);  // drop "aten::"
        fused->impl(bare.c_str(), torch::CppFunction::makeFromBoxedFunction<&fusedKernel>());
      }
      if (auto mha = dispatcher.findSchema({kNativeMhaOp.name, ""}); mha && want_fused) {
        g_native_mha = new ProbedOp(ProbedOp::resolve(*mha, &kNativeMhaOp));
        g_native_mha->offerReruns(*mha);
        fused->impl("_native_multi_head_attention", torch::CppFunction::makeFromBoxedFunction<&nativeMhaKernel>());
      }
      if (dispatcher.findSchema({"aten::_transformer_encoder_layer_fwd", ""}) && want_fused) {
        fused->impl("_transformer_encoder_layer_fwd", torch::CppFunction::makeFromBoxedFunction<&unprobedKernel>());
      }
      g_sdp_choice = new std::optional<c10::OperatorHandle>(dispatcher.findSchema({"aten::_fused_sdp_choice", ""}));
      install_others(want_fused);
      auto sdpa = dispatcher.findSchema({"aten::scaled_dot_product_attention", ""});
      if (sdpa && want_sdpa) {
        g_sdpa = new ProbedOp(ProbedOp::resolve(*sdpa, &kMathOp));
        for (auto key : {c10::DispatchKey::AutogradCPU, c10::DispatchKey::AutogradCUDA}) {
          auto* lib = new torch::Library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
          lib->impl("scaled_dot_product_attention", torch::CppFunction::makeFromBoxedFunction<&sdpaKernel>());
        }
      }
      // The Library objects are leaked on purpose: dropping one deregisters its kernels.
    } catch (const std::exception& e) {
      result = Status::Error(std::string("could not install attention probes: ") + e.what());
    }
  });
  return result;
}

Status probeOperator(const std::string& name, const std::vector<std::pair<std::string, Role>>& roles,
                     const std::string& backend) {
  static std::mutex mu;
  static std::set<std::string> probed;
  std::lock_guard<std::mutex> lock(mu);
  if (probed.count(name)) return Status::Ok();
  std::string ns = name.substr(0, name.find("::")), bare = name.substr(std::min(name.size(), ns.size() + 2));
  if (ns.empty() || bare.empty() || ns.size() == name.size())
    return Status::Error("'" + name + "' is not NAMESPACE::OP");
  auto handle = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!handle) return Status::Error("no operator " + name + " is registered");
  const auto& args = handle->schema().arguments();
  ProbedOp op;
  op.num_arguments = args.size();
  bool output_argument = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::optional<Role> role;
    for (const auto& [arg, r] : roles) {
      if (arg == args[i].name()) role = r;
    }
    if (!role) role = roleOfArgument(args[i].name());
    if (role) op.inputs.emplace_back(i, *role);
    else op.others.emplace_back(i, args[i].name());
    output_argument = output_argument || (role && *role == Role::kO);
  }
  for (Role need : {Role::kQ, Role::kK, Role::kV}) {
    bool found = false;
    for (const auto& [i, r] : op.inputs) found = found || r == need;
    if (!found) return Status::Error(name + " has no argument for " + roleName(need) + "; name it, e.g. q=ARG");
  }
  // Leaked with the library below: the op's description lives as long as its kernel.
  auto* desc = new AttentionOp{(new std::string(name))->c_str(), (new std::string(backend))->c_str(), Phase::kForward,
                               output_argument ? std::vector<Role>{} : std::vector<Role>{Role::kO}};
  op.desc = desc;
  op.offerReruns(*handle, /*user_op=*/true);
  auto* lib = new torch::Library(torch::Library::IMPL, ns, c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
  lib->impl(bare.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<OperatorProbe>(std::move(op))));
  probed.insert(name);
  return Status::Ok();
}

}  // namespace nanprov::probes
