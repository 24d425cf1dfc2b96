// CallRecorder: how a probed call becomes a record, for every probe that finds attention (the
// dispatcher's wrappers, the bootstrap's brackets, attention written in plain ops, the hooks that
// assemble a backward run as separate ops). The steps, in the order a call takes them:
//   naming     where the call ran (module, recompute, grad mode) and its rank:layer:call;
//   tracing    its kernels while it runs (CallTrace: an NVTX range and a CUPTI correlation id);
//   injection  its outputs corrupted where --inject says;
//   finishing  its tensors handed to the checks (DeviceChecks), asynchronous on CUDA;
//   recording  once their health is known: offered for capture, then stored. This last step is
//              the checks' sink (checked_call_sink.h): they call it from whichever thread
//              collected the results.
// Owned by Probes and built with what it reaches, so no step looks for the process's probes; only
// the entry points that the dispatcher, an op registration or the bootstrap call do.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

#include "base/records/call_event.h"
#include "base/records/roles.h"
#include "probes/core/call_identity.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/checked_call_sink.h"
#include "probes/libtorch/tensor_health.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::probes {

class DeviceChecks;
class ModulePathCache;
class Session;

class CallRecorder final : public CheckedCallSink {
 public:
  CallRecorder(Session& session, KernelTracer& tracer, ModulePathCache& module_paths, DeviceChecks& checks,
               Captures& captures);
  CallRecorder(const CallRecorder&) = delete;
  CallRecorder& operator=(const CallRecorder&) = delete;

  // Naming.
  // A forward call's name where it runs (siteOfForward); a call that begins the next inference
  // forward pass closes the last. Given the call's Q, the module is found from the parameter
  // behind Q once that is trusted (module_path_cache.h). For a call that already ran, `link` (the
  // address of its output O) makes it findable by its backward under the same lock.
  CallName nameForward(const at::Tensor& q = {}, uintptr_t link = 0);
  // Makes a forward named before it ran findable by its backward through `output` (O's address).
  void link(const CallName& name, uintptr_t output);
  // A backward call, found by the address of its forward's output O.
  CallName nameBackward(uintptr_t output);
  // The backward of `fwd`, assembled from hooks (backward_watch.h).
  CallName nameBackwardOf(const CallName& fwd);
  // The event a named call's record begins as; the call is counted as begun. `desc`'s name and
  // backend must outlive the process (the probed ops' tables, or interned).
  CallEvent eventFor(const CallName& name, const AttentionOp& desc, Phase phase);

  // Tracing (CallTrace, below).
  // Whether a CUDA call's kernels may still be traced, so that it is named before it runs.
  bool tracing() const;
  // Why the kernels of a CUDA call not traced are not attributed (interned).
  const char* untracedReason() const;

  // Injection (only with --inject).
  // Corrupts `rec`'s outputs that a spec names, in place.
  void inject(CallEvent& rec, const RoleTensors& outputs);
  // A gradient on its way to autograd is not the call's to change in place: a spec that names
  // `role` gets a corrupted copy of `grad` (as_recorded: the view the record holds, as
  // WatchedGradient's), returned for the hook to hand on; undefined when none does.
  at::Tensor injectGradient(CallEvent& rec, Role role, const at::Tensor& grad,
                            const std::function<at::Tensor(const at::Tensor&)>& as_recorded);

  // Finishing: measures every tensor of a finished call and records it: asynchronously on CUDA;
  // on the CPU synchronously (or deferred, device_checks.h), the op itself as the call's kernel.
  void finish(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);

 private:
  friend class CallTrace;

  // Where a forward call runs: its module, whether autograd's engine runs it (activation
  // checkpointing recomputing the forward inside backward), and whether gradients are on.
  ForwardSite siteOfForward(const at::Tensor& q);
  // Recording: offered for capture, then stored.
  void recordChecked(CallEvent rec, const RoleTensors& tensors, const CallArgs& args, const char* missing) override;

  Session& session_;
  KernelTracer& tracer_;
  ModulePathCache& module_paths_;
  DeviceChecks& checks_;
  Captures& captures_;
};

// Traces one CUDA call's kernels: an NVTX range and a CUPTI external correlation id from
// construction to destruction, on the thread that runs it.
class CallTrace {
 public:
  CallTrace(CallRecorder& recorder, const CallName& name);
  ~CallTrace();
  CallTrace(const CallTrace&) = delete;
  CallTrace& operator=(const CallTrace&) = delete;

  // Empty when the call's kernels are being attributed; interned (base/interned_text.h).
  const char* unattributed() const { return reason_; }

 private:
  KernelTracer& tracer_;
  const char* reason_ = "";
};

// Entering (mode 1: with gradients, 0: without) or leaving (-1) a torch.compile'd graph on this
// thread. Autograd runs a compiled training graph with gradients off, so inside one the grad
// mode of the code that called it says whether this is inference.
void setCompiledGradMode(int mode);

bool onCuda(const RoleTensors& tensors);
RoleTensors concat(RoleTensors a, const RoleTensors& b);

}  // namespace nanprov::probes
