#include "probes/attention_hook.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "probes/roles.h"
#include "probes/session.h"
#include "probes/tensor_health.h"

namespace nanprov {
namespace {

// Why BackendSelect: it is in every dispatch (c10's default included set), it sits right above
// the backend kernel and below autograd, Python subclasses and functionalization, and only
// factory ops have kernels there. So the wrapper sees exactly the tensors the kernel saw and
// produced, forward and backward alike. (ADInplaceOrView, the obvious choice, is skipped by the
// autograd kernels of ops that neither view nor mutate, such as every *_backward op.)
const c10::DispatchKeySet kBelowProbe(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);
using Stack = torch::jit::Stack;
using Tensors = std::vector<std::pair<Role, at::Tensor>>;

// A probed op, resolved against this torch build's schema.
struct ProbedOp {
  const AttentionOp* desc = nullptr;
  std::vector<std::pair<size_t, Role>> inputs;  // argument index → role
  size_t num_arguments = 0;
};

// Filled once by installAttentionProbes(), read-only afterwards.
std::unordered_map<std::string, ProbedOp>* g_probed = nullptr;
ProbedOp* g_sdpa = nullptr;
const AttentionOp kMathOp = {"aten::_scaled_dot_product_attention_math", "math", Phase::kForward,
                             {Role::kO}};

// >0 while this thread is inside a probed op: inner attention ops are part of the outer call.
thread_local int t_depth = 0;
// Fused calls probed on this thread; tells the SDPA wrapper whether a fused backend ran.
thread_local int64_t t_fused_calls = 0;

struct DepthGuard {
  DepthGuard() { ++t_depth; }
  ~DepthGuard() { --t_depth; }
};

ProbedOp resolve(const c10::OperatorHandle& handle, const AttentionOp* desc) {
  ProbedOp probed;
  probed.desc = desc;
  const auto& args = handle.schema().arguments();
  probed.num_arguments = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (auto role = roleOfArgument(args[i].name())) probed.inputs.emplace_back(i, *role);
  }
  return probed;
}

Tensors takeInputs(const ProbedOp& probed, const Stack& stack) {
  Tensors inputs;
  auto first = stack.end() - static_cast<std::ptrdiff_t>(probed.num_arguments);
  for (const auto& [index, role] : probed.inputs) {
    const c10::IValue& v = *(first + static_cast<std::ptrdiff_t>(index));
    if (v.isTensor() && v.toTensor().defined()) inputs.emplace_back(role, v.toTensor());
  }
  return inputs;
}

Tensors takeOutputs(const AttentionOp& desc, const Stack& stack, size_t num_returns) {
  Tensors outputs;
  auto first = stack.end() - static_cast<std::ptrdiff_t>(num_returns);
  for (size_t i = 0; i < desc.outputs.size() && i < num_returns; ++i) {
    const c10::IValue& v = *(first + static_cast<std::ptrdiff_t>(i));
    if (v.isTensor() && v.toTensor().defined()) outputs.emplace_back(desc.outputs[i], v.toTensor());
  }
  return outputs;
}

uintptr_t addressOf(const Tensors& tensors, Role role) {
  for (const auto& [r, t] : tensors) {
    if (r == role && t.has_storage()) return reinterpret_cast<uintptr_t>(t.data_ptr());
  }
  return 0;
}

CallRecord recordFor(const CallName& name, const AttentionOp& desc, Phase phase) {
  CallRecord rec;
  rec.seq = name.seq;
  rec.step = name.step;
  rec.layer = name.layer;
  rec.call = name.call;
  rec.fwd_seq = name.fwd_seq;
  rec.module = name.module;
  rec.phase = phase;
  rec.op = desc.name;
  rec.backend = desc.backend;
  return rec;
}

// Corrupts matching outputs (only with --inject), then measures every tensor.
CallRecord checked(CallRecord rec, const Tensors& inputs, const Tensors& outputs) {
  Session& session = Session::get();
  for (const InjectionSpec& spec : session.injections()) {
    if (!spec.matches(session.rank(), rec.layer, rec.step, rec.call, rec.phase)) continue;
    for (const auto& [role, t] : outputs) {
      if (role != spec.tensor) continue;
      corruptFirstElement(t, spec.value);
      rec.injected = roleName(role);
    }
  }
  for (const auto& [role, t] : inputs) rec.tensors.push_back(measureTensor(t, role));
  for (const auto& [role, t] : outputs) rec.tensors.push_back(measureTensor(t, role));
  return rec;
}

template <typename F>
void guarded(const char* what, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    logOnce(what, std::string(what) + " failed, this call is not recorded: " + e.what());
  }
}

void fusedKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  const ProbedOp* probed = nullptr;
  if (t_depth == 0 && Session::get().active()) {
    auto it = g_probed->find(handle.schema().name());
    if (it != g_probed->end()) probed = &it->second;
  }
  if (!probed) {
    handle.redispatchBoxed(ks & kBelowProbe, stack);
    return;
  }
  ++t_fused_calls;
  int64_t start = wallClockNs();
  Tensors inputs = takeInputs(*probed, *stack);
  {
    DepthGuard depth;
    handle.redispatchBoxed(ks & kBelowProbe, stack);
  }
  int64_t end = wallClockNs();
  guarded("attention probe", [&] {
    const AttentionOp& desc = *probed->desc;
    Tensors outputs = takeOutputs(desc, *stack, handle.schema().returns().size());
    CallIdentity& ids = Session::get().identity();
    CallName name = desc.phase == Phase::kForward
                        ? ids.forward(Session::modulePath(), addressOf(outputs, Role::kO))
                        : ids.backward(addressOf(inputs, Role::kO));
    CallRecord rec = recordFor(name, desc, desc.phase);
    rec.start_ns = start;
    rec.end_ns = end;
    Session::get().record(checked(std::move(rec), inputs, outputs));
  });
}

// The backward of one MATH-path call, assembled from autograd hooks: dO arrives on O first,
// then dQ/dK/dV on the inputs. Recorded once every expected gradient was seen.
struct MathBackward {
  std::mutex mu;
  CallName fwd;
  std::optional<CallRecord> rec;  // named when dO arrives
  std::vector<TensorHealth> fwd_inputs;  // Q K V mask O, as the forward measured them
  int expected = 0;
  int received = 0;

  at::Tensor receive(Role role, const at::Tensor& grad) {
    std::lock_guard<std::mutex> lock(mu);
    at::Tensor replaced;
    guarded("math backward probe", [&] {
      if (!rec) {
        rec = recordFor(Session::get().identity().backwardOf(fwd), kMathOp, Phase::kBackward);
        rec->start_ns = wallClockNs();
        rec->tensors = fwd_inputs;
      }
      Session& session = Session::get();
      for (const InjectionSpec& spec : session.injections()) {
        if (spec.tensor == role && spec.matches(session.rank(), rec->layer, rec->step, rec->call, Phase::kBackward)) {
          replaced = grad.clone();
          corruptFirstElement(replaced, spec.value);
          rec->injected = roleName(role);
        }
      }
      rec->tensors.push_back(measureTensor(replaced.defined() ? replaced : grad, role));
      if (++received == expected) {
        rec->end_ns = wallClockNs();
        session.record(std::move(*rec));
        rec.reset();
      }
    });
    return replaced;  // undefined: the gradient is left as it is
  }
};

void watchMathBackward(const CallName& fwd, const CallRecord& fwd_rec, const Tensors& inputs,
                       const at::Tensor& out) {
  if (!out.requires_grad()) return;
  auto pending = std::make_shared<MathBackward>();
  pending->fwd = fwd;
  pending->fwd_inputs = fwd_rec.tensors;
  std::vector<std::pair<Role, at::Tensor>> watched = {{Role::kdO, out}};
  for (const auto& [role, t] : inputs) {
    if (t.requires_grad() && role != Role::kMask) {
      watched.emplace_back(role == Role::kQ ? Role::kdQ : role == Role::kK ? Role::kdK : Role::kdV, t);
    }
  }
  pending->expected = static_cast<int>(watched.size());
  for (const auto& [role, t] : watched) {
    Role r = role;
    t.register_hook([pending, r](const at::Tensor& grad) { return pending->receive(r, grad); });
  }
}

void sdpaKernel(const c10::OperatorHandle& handle, c10::DispatchKeySet ks, Stack* stack) {
  if (t_depth > 0 || !Session::get().active()) {
    handle.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    return;
  }
  Tensors inputs = takeInputs(*g_sdpa, *stack);
  int64_t fused_before = t_fused_calls;
  int64_t start = wallClockNs();
  handle.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
  if (t_fused_calls != fused_before) return;  // a fused backend was probed underneath
  int64_t end = wallClockNs();
  guarded("math attention probe", [&] {
    at::Tensor out = stack->back().toTensor();
    Tensors outputs = {{Role::kO, out}};
    CallName name = Session::get().identity().forward(Session::modulePath(), 0);
    CallRecord rec = recordFor(name, kMathOp, Phase::kForward);
    rec.start_ns = start;
    rec.end_ns = end;
    CallRecord done = checked(std::move(rec), inputs, outputs);
    watchMathBackward(name, done, inputs, out);
    Session::get().record(std::move(done));
  });
}

}  // namespace

Status installAttentionProbes() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    try {
      auto& dispatcher = c10::Dispatcher::singleton();
      // NANPROV_HOOKS=fused|sdpa narrows what is wrapped, to bisect a misbehaving torch build.
      const char* hooks_env = std::getenv("NANPROV_HOOKS");
      std::string hooks = hooks_env && *hooks_env ? hooks_env : "fused,sdpa";
      bool want_fused = hooks.find("fused") != std::string::npos;
      bool want_sdpa = hooks.find("sdpa") != std::string::npos;
      g_probed = new std::unordered_map<std::string, ProbedOp>();
      auto* fused = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::BackendSelect,
                                       __FILE__, __LINE__);
      for (const AttentionOp& desc : attentionOps()) {
        auto handle = dispatcher.findSchema({desc.name, ""});
        if (!handle || !want_fused) continue;  // not in this torch build, or not wanted
        (*g_probed)[desc.name] = resolve(*handle, &desc);
        std::string bare = std::string(desc.name).substr(6);  // drop "aten::"
        fused->impl(bare.c_str(), torch::CppFunction::makeFromBoxedFunction<&fusedKernel>());
      }
      auto sdpa = dispatcher.findSchema({"aten::scaled_dot_product_attention", ""});
      if (sdpa && want_sdpa) {
        g_sdpa = new ProbedOp(resolve(*sdpa, &kMathOp));
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

}  // namespace nanprov
