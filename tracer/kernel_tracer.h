// KernelTracer: attributes the CUDA kernels of each attention call, through CUPTI's activity API
// (CONCURRENT_KERNEL, never the serialising KERNEL kind) and an external correlation id per
// call, and marks each call with an NVTX range in domain "nanprov". No LibTorch.
//
// CUPTI has one activity client per process. When it cannot be had (no GPU, another subscriber
// such as torch.profiler or Nsight, an old driver, nanprov built without CUPTI), the tracer says
// why and calls are stored as unattributed with that reason; training is never affected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "base/status.h"

namespace nanprov {

struct TracerStats {
  int64_t attributed_kernels = 0;
  int64_t dropped_records = 0;  // CUPTI had no buffer for them (the buffer cap was reached)
  int64_t buffers_in_use = 0;
  int64_t kernel_records = 0;       // CONCURRENT_KERNEL records seen, attention's or not
  int64_t external_id_records = 0;  // our EXTERNAL_CORRELATION records seen
  int64_t api_records = 0;          // RUNTIME and DRIVER records seen
  bool detached = false;            // CUPTI was detached after the trace window
  bool started = false;             // CUPTI was started in this process (it may be detached since)
};

class KernelTracer {
 public:
  // The tracer of this build (CUPTI, or one that says why not). One per process: CUPTI serves
  // one activity client, so its owner (the probes' Probes, or replay's engine) makes it once.
  static std::unique_ptr<KernelTracer> create();
  virtual ~KernelTracer() = default;

  // Turns collection on; later calls return the first result. Never throws.
  virtual Status start() = 0;

  // Around one attention call, on the thread that runs it. Returns true when its kernels will be
  // attributed; otherwise unattributedReason() says why. `label` names the NVTX range; it may be
  // empty when wantsLabel() said no.
  virtual bool enter(int64_t seq, const std::string& label) = 0;
  // Whether a call's label is read: while kernels are traced, or while an NVTX tool (Nsight) is
  // attached. After the trace window a call then builds no string for the tracer.
  virtual bool wantsLabel() const = 0;
  virtual void exit() = 0;
  // No call will be traced again and no label is read: the trace window is over (or the tracer
  // could not start) and no NVTX tool is attached. From then on a call need not be named before
  // it runs. Read without a lock.
  virtual bool settled() const = 0;

  // Another profiler holds CUPTI: stop attributing until reclaim(). Calls meanwhile are
  // unattributed with `reason`.
  virtual void yield(const std::string& reason) = 0;
  virtual void reclaim() = 0;
  virtual bool yielded() const = 0;

  // Stops collection for good (the sampled window is over), so the process stops paying for
  // CUPTI; calls afterwards are unattributed with `reason`. Records already traced are kept, and
  // one step boundary later CUPTI is detached from the process.
  virtual void pause(const std::string& reason) = 0;
  // A CUDA graph was captured while CUPTI may be attached: from now on CUPTI is never detached.
  // A graph instantiated while CUPTI is attached carries its instrumentation, and a replay after
  // CUPTI detached faulted the training (unspecified launch failure) on the H200.
  virtual void keepAttached() = 0;

  // Interned (base/interned_text.h), so a call keeps it without copying; read without a lock.
  virtual const char* unattributedReason() const = 0;

  // Kernels attributed since the last collect. `at_exit` also forces out partly filled buffers.
  virtual std::vector<KernelRecord> collect(bool at_exit) = 0;
  virtual TracerStats stats() const = 0;
};

// NVTX ranges in domain "nanprov", so Nsight Systems shows the same rank:layer:call labels.
// Cost nothing when no tool is attached.
void pushCallRange(const std::string& label);
// An NVTX tool was injected into this process (NVTX_INJECTION64_PATH, as Nsight sets it).
bool nvtxToolAttached();
void popCallRange();

}  // namespace nanprov
