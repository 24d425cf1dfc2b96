#include "probes/libtorch/call_recorder.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <utility>
#include <vector>

#include "base/records/call_health.h"
#include "base/records/call_name.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"
#include "probes/libtorch/device_checks.h"
#include "probes/libtorch/module_path_cache.h"
#include "probes/libtorch/probe_thread.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::probes {
namespace {

// The grad mode of the code around each compiled graph running on this thread, innermost last.
thread_local std::vector<bool> t_compiled_grad;

constexpr const char* kProfilerReason =
    "torch.profiler was active: CUPTI serves one activity client per process, and the profiler had it";

bool injects(const InjectionSpec& spec, const Session& session, const CallEvent& rec) {
  return spec.where.matches(session.rank(), rec.layer, rec.step, rec.call, rec.phase);
}

}  // namespace

void setCompiledGradMode(int mode) {
  if (mode >= 0) t_compiled_grad.push_back(mode == 1);
  else if (!t_compiled_grad.empty()) t_compiled_grad.pop_back();
}

bool onCuda(const RoleTensors& tensors) { return cudaDeviceOf(tensors) >= 0; }

RoleTensors concat(RoleTensors a, const RoleTensors& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

CallRecorder::CallRecorder(Session& session, KernelTracer& tracer, ModulePathCache& module_paths, DeviceChecks& checks,
                           Captures& captures)
    : session_(session), tracer_(tracer), module_paths_(module_paths), checks_(checks), captures_(captures) {}

ForwardSite CallRecorder::siteOfForward(const at::Tensor& q) {
  ForwardSite site;
  site.compiled = !t_compiled_grad.empty();
  // Inside a compiled graph the bootstrap names calls in graph order: every call must ask it.
  site.module = site.compiled
                    ? InternedText(session_.modulePath())
                    : module_paths_.path(ModulePathCache::sourceParameter(q), [this] { return session_.modulePath(); });
  site.in_backward = torch::autograd::get_current_graph_task_id() != -1;
  site.grad_enabled = t_compiled_grad.empty() ? at::GradMode::is_enabled() : t_compiled_grad.back();
  site.grad_enabled = site.grad_enabled && !c10::InferenceMode::is_enabled();
  return site;
}

CallName CallRecorder::nameForward(const at::Tensor& q, uintptr_t link) {
  const ForwardSite site = siteOfForward(q);
  // Inside a --probe-module bracket the first forward is the module's call, named when it began.
  if (std::optional<CallName> module_call = claimBoundaryName()) {
    if (link) session_.identity().link(*module_call, link);
    return *module_call;
  }
  CallName name = session_.identity().forward(site, link);
  if (name.opened_step) session_.stepBegan(name.step);
  return name;
}

void CallRecorder::link(const CallName& name, uintptr_t output) { session_.identity().link(name, output); }

CallName CallRecorder::nameBackward(uintptr_t output) { return session_.identity().backward(output); }

CallName CallRecorder::nameBackwardOf(const CallName& fwd) { return session_.identity().backwardOf(fwd); }

// The rank is set here, once: every record begins here.
CallEvent CallRecorder::eventFor(const CallName& name, const AttentionOp& desc, Phase phase) {
  session_.callBegun();
  return CallEvent{.seq = name.seq,
                   .rank = session_.rank(),
                   .step = name.step,
                   .layer = name.layer,
                   .call = name.call,
                   .phase = phase,
                   .fwd_seq = name.fwd_seq,
                   .recompute = name.recompute,
                   .op = desc.name,
                   .backend = desc.backend,
                   .module = name.module.c_str(),
                   .compiled = name.compiled_training || !t_compiled_grad.empty()};
}

bool CallRecorder::tracing() const { return !tracer_.settled(); }

const char* CallRecorder::untracedReason() const { return tracer_.unattributedReason(); }

void CallRecorder::inject(CallEvent& rec, const RoleTensors& outputs) {
  for (const InjectionSpec& spec : session_.injections()) {
    if (!injects(spec, session_, rec)) continue;
    for (const auto& [role, t] : outputs) {
      if (role != spec.tensor) continue;
      corrupt(t, spec);
      rec.injected = roleName(role);
    }
  }
}

at::Tensor CallRecorder::injectGradient(CallEvent& rec, Role role, const at::Tensor& grad,
                                        const std::function<at::Tensor(const at::Tensor&)>& as_recorded) {
  at::Tensor replaced;
  for (const InjectionSpec& spec : session_.injections()) {
    if (spec.tensor != role || !injects(spec, session_, rec)) continue;
    replaced = grad.clone();
    corrupt(as_recorded ? as_recorded(replaced) : replaced, spec);
    rec.injected = roleName(role);
  }
  return replaced;
}

void CallRecorder::finish(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  ProbeCost::countCall();
  if (rec.phase == Phase::kForward) noteCheckedCall();
  // Stored for the known-issue matcher (some need dropout on, some off): the call's own word.
  for (const auto& [name, value] : args) {
    if (name == "dropout_p" && value.isDouble()) rec.dropout_p = value.toDouble();
  }
  rec.device = Device::fromIndex(cudaDeviceOf(tensors));
  if (!rec.device.isCpu()) {
    checks_.submit(std::move(rec), tensors, args);
    return;
  }
  // On the CPU the call's kernel is the op itself: readers show it from the call's own row
  // (store/reader.h), so the store does not repeat it. Deferred as a CUDA call is (device_checks.h).
  checks_.submitHost(std::move(rec), tensors, args);
}

void CallRecorder::recordChecked(CallEvent rec, const RoleTensors& tensors, const CallArgs& args, const char* missing) {
  ProbeCost::Scope cost(ProbeStage::kRecording);
  // Classified once, here, where the tensors' health is complete: the capture policy and the
  // store both read it (readers find edges by it).
  rec.health = static_cast<int>(edgeKindOf(rec));
  captures_.offer(rec, tensors, args, missing);
  session_.record(rec);
}

CallTrace::CallTrace(CallRecorder& recorder, const CallName& name) : tracer_(recorder.tracer_) {
  // Checked before CUPTI is touched: registering our buffers now would take the profiler's.
  if (torch::profiler::impl::profilerEnabled()) {
    tracer_.yield(kProfilerReason);
  } else if (!tracer_.start().ok()) {
    reason_ = tracer_.unattributedReason();
  } else if (tracer_.yielded()) {
    tracer_.reclaim();
  }
  const int rank = recorder.session_.rank();
  const bool traced =
      tracer_.enter(name.seq, tracer_.wantsLabel() ? callName(rank, name.layer, name.call) : std::string());
  if (!traced && *reason_ == '\0') reason_ = tracer_.unattributedReason();
}

CallTrace::~CallTrace() { tracer_.exit(); }

}  // namespace nanprov::probes
