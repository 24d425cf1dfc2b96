// DeviceQueue: the queue a lane of DeviceChecks launches one thread's checks into on one CUDA
// device, and what the checks ask the device before a launch; CapturedCheck, a check captured
// into a CUDA graph (GraphChecks); and the device's description for a capture's environment.
// Built with the CUDA toolkit (device_queue_cuda.cpp) they are nanprov's kernels:
// kernels::HealthCheckQueue (the fused and dense check kernels on the call's own stream, their
// results read back from mapped memory), kernels::GraphCheck and kernels::gpuIdentity. Built
// without it (no_cuda_device_queue.cpp) no queue can be made, no stream is capturing a graph and
// no check can be captured, so DeviceChecks measures every CUDA tensor on the host. As the
// tracer's twins, so CI (the toolkit, no GPU) compiles every line of the CUDA side, and nothing
// else under probes/ asks which build it is.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "kernels/health_check.h"
#include "kernels/health_check_queue.h"  // CheckKind, Ready, Clock: declarations only, any build

namespace nanprov::probes {

class DeviceQueue {
 public:
  using Ready = kernels::HealthCheckQueue::Ready;
  using Clock = kernels::HealthCheckQueue::Clock;

  // `slots` slots on `device` for checks of `kind`; fails with a reason when none can be made
  // there (always, built without the CUDA toolkit).
  static StatusOr<std::unique_ptr<DeviceQueue>> create(int device, int slots, kernels::CheckKind kind);
  virtual ~DeviceQueue() = default;

  // kernels::HealthCheckQueue says what each does, and when it waits for the GPU.
  // Producer side: the lane's thread.
  virtual int reserve(const Ready& overflow) = 0;
  virtual Status submit(const kernels::TensorView* views, int count, void* stream, uint64_t token) = 0;
  virtual Status submitDense(const kernels::DenseTensor* tensors, int count, void* stream, uint64_t token) = 0;
  // Collector side: any thread.
  virtual int collect(const Ready& ready, bool patient) = 0;
  virtual int drain(const Ready& ready, Clock::time_point deadline, int* unfinished) = 0;
  virtual int64_t forcedWaits() const = 0;
  virtual int slots() const = 0;
};

// Makes a queue as DeviceQueue::create does: what DeviceChecks is handed (the probes pass
// DeviceQueue::create; tests a fake whose slots finish when the test says, fake_device_queue.h).
using DeviceQueueFactory =
    std::function<StatusOr<std::unique_ptr<DeviceQueue>>(int device, int slots, kernels::CheckKind kind)>;

// True when the fused kernel can read `view` (kernels::checkable); every view, without the toolkit.
bool deviceReads(const kernels::TensorView& view);
// True while `stream` (a cudaStream_t) is capturing a CUDA graph (kernels::streamIsCapturing):
// nothing may be launched on it, nor measured on the host. Never, without the toolkit.
bool streamCapturing(void* stream);

// A check captured into the CUDA graph a stream is capturing (kernels::GraphCheck): every replay
// of the graph runs it and publishes its counts, read here without a driver call.
class CapturedCheck {
 public:
  // Captures the check of `views[0..count)` into the graph `stream` is capturing on `device`;
  // fails with a reason when it cannot (always, built without the CUDA toolkit).
  static StatusOr<std::unique_ptr<CapturedCheck>> capture(int device, const kernels::TensorView* views, int count,
                                                          void* stream);
  virtual ~CapturedCheck() = default;  // only once the graph can no longer run

  enum class Replay {
    kPending,      // not run yet, or still publishing
    kDone,         // `out` holds its counts
    kOverwritten,  // later replays ran before it was read: its counts are gone
  };
  // The counts of replay `n` (0 = the first since the capture) into out[0..count()).
  virtual Replay read(uint64_t n, kernels::HealthCounts* out) const = 0;
  virtual int count() const = 0;
};

// True where checks can be captured into CUDA graphs: built with the CUDA toolkit.
bool graphChecksBuilt();
// The id of the capture `stream` (a cudaStream_t) is part of (kernels::captureIdOf); 0 when it is
// capturing nothing, and always without the toolkit.
uint64_t captureIdOf(void* stream);

// What describes CUDA device `device` in a capture's environment (base/records/device_identity.h:
// its name, UUID, PCI bus id and drivers), added to `meta`; nothing without the toolkit.
void describeDevice(int device, std::map<std::string, std::string>& meta);

}  // namespace nanprov::probes
