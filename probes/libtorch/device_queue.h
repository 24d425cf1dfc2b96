// DeviceQueue: the queue a lane of DeviceChecks launches one thread's checks into on one CUDA
// device, and what the checks ask the device before a launch. Built with the CUDA toolkit
// (device_queue_cuda.cpp) it is kernels::HealthCheckQueue: the fused and dense check kernels on
// the call's own stream, their results read back from mapped memory. Built without it
// (no_cuda_device_queue.cpp) no queue can be made and no stream is capturing a graph, so
// DeviceChecks measures every CUDA tensor on the host. As the tracer's twins, so CI (the toolkit,
// no GPU) compiles every line of the CUDA side.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/health_check.h"
#include "kernels/health_check_queue.h"  // CheckKind, Ready, Clock: declarations only, any build

namespace nanprov {

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

// True when the fused kernel can read `view` (kernels::checkable); every view, without the toolkit.
bool deviceReads(const kernels::TensorView& view);
// True while `stream` (a cudaStream_t) is capturing a CUDA graph (kernels::streamIsCapturing):
// nothing may be launched on it, nor measured on the host. Never, without the toolkit.
bool streamCapturing(void* stream);

}  // namespace nanprov
