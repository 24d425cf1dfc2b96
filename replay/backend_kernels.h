// Which kernels each backend launches when replay runs it: CUPTI through nanprov's tracer, with
// every attention op (forward or backward, on whichever thread autograd runs it) marked as a call
// of the backend being replayed. This is how an edge that ran after the run's kernel-tracing
// window still gets its kernel named: the captured backend, fed the captured tensors on the same
// GPU model, launches the same kernels.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "base/records/call_record.h"

namespace nanprov::replay {

class BackendKernelTrace {
 public:
  // Starts tracing on CUDA; when CUPTI cannot be had, nothing is traced and unavailable() says
  // why. On the CPU the kernel of each run is its attention ATen op, recorded by name.
  explicit BackendKernelTrace(const at::Device& device);
  ~BackendKernelTrace();
  BackendKernelTrace(const BackendKernelTrace&) = delete;
  BackendKernelTrace& operator=(const BackendKernelTrace&) = delete;

  // The attention ops run from now until the next call belong to backend run number `run`.
  void attributeTo(int run);

  // The kernels of run `run`'s attention ops of one phase, in launch order, once every traced
  // run has finished on the device (its outputs were copied to the host). Call once, at the end.
  std::vector<KernelRecord> kernelsOf(int run, Phase phase);

  std::string unavailable() const { return unavailable_; }
  bool onCpu() const { return on_cpu_; }

 private:
  std::string unavailable_;
  uint64_t callback_ = 0;
  bool collected_ = false;
  std::map<int64_t, std::vector<KernelRecord>> by_call_;
  bool on_cpu_ = false;
  std::map<int64_t, std::string> cpu_ops_;  // on the CPU: call number → outermost attention op
};

// "NVIDIA H200 (sm_90)": the model the device-side kernels are specific to, of GPU `index`; empty
// without CUDA.
std::string gpuModel(int index = 0);

}  // namespace nanprov::replay
