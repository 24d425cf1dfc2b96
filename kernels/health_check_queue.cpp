#include "kernels/health_check_queue.h"

#include <cuda_runtime_api.h>

#include <atomic>

#include "base/scoped_resource.h"

namespace nanprov::kernels {
namespace {

Status cudaFailure(const char* what, cudaError_t err) {
  return Status::Error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Makes `device` current for a scope and restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      switched_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  bool switched_ = false;
};

constexpr int kAll = 1 << 30;

// Owners of what a queue allocates. Each frees on the device that is current when it is
// dropped, so the queue's destructor drops them inside a DeviceScope.
using DeviceMemory = ScopedResource<void*, &cudaFree>;
using MappedHostMemory = ScopedResource<void*, &cudaFreeHost>;
using Event = ScopedResource<cudaEvent_t, &cudaEventDestroy>;

}  // namespace

struct HealthCheckQueue::Buffers {
  DeviceMemory scratch;       // every slot's CheckScratch
  MappedHostMemory results;   // every slot's HealthCounts, mapped into the device
};

bool streamIsCapturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) return false;
  return status != cudaStreamCaptureStatusNone;
}

std::string deviceDescription(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

struct HealthCheckQueue::Slot {
  CheckScratch* scratch = nullptr;  // device
  HealthCounts* results = nullptr;  // host view of the mapped results
  HealthCounts* results_device = nullptr;
  Event done;
  uint64_t token = 0;
  int count = 0;
};

// Whether the device flagged every result of `s` (health_check.cu sets the flags last). The
// fence keeps the counts' reads after the flags' on this side.
bool HealthCheckQueue::flagged(const Slot& s) {
  for (int i = 0; i < s.count; ++i) {
    if (*static_cast<const volatile uint32_t*>(&s.results[i].written) != 1) return false;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

StatusOr<std::unique_ptr<HealthCheckQueue>> HealthCheckQueue::create(int device, int slots) {
  int devices = 0;
  if (cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess) {
    return cudaFailure("no usable CUDA device", err);
  }
  if (device < 0 || device >= devices) return Status::Error("CUDA device " + std::to_string(device) + " does not exist");
  DeviceScope scope(device);
  std::unique_ptr<HealthCheckQueue> q(new HealthCheckQueue());
  q->device_ = device;
  q->buffers_ = std::make_unique<Buffers>();
  size_t scratch_bytes = sizeof(CheckScratch) * static_cast<size_t>(slots);
  size_t result_bytes = sizeof(HealthCounts) * kMaxTensors * static_cast<size_t>(slots);
  void* scratch = nullptr;
  if (cudaError_t err = cudaMalloc(&scratch, scratch_bytes); err != cudaSuccess) return cudaFailure("cudaMalloc", err);
  q->buffers_->scratch.reset(scratch);
  // Zeroed once; every check leaves its scratch zeroed again.
  if (cudaError_t err = cudaMemset(scratch, 0, scratch_bytes); err != cudaSuccess) return cudaFailure("cudaMemset", err);
  void* results = nullptr;
  if (cudaError_t err = cudaHostAlloc(&results, result_bytes, cudaHostAllocMapped); err != cudaSuccess) {
    return cudaFailure("cudaHostAlloc", err);
  }
  q->buffers_->results.reset(results);
  void* results_device = nullptr;
  if (cudaError_t err = cudaHostGetDevicePointer(&results_device, results, 0); err != cudaSuccess) {
    return cudaFailure("cudaHostGetDevicePointer", err);
  }
  // One-time wait so the zeroed scratch is in place before any check can use it.
  if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) return cudaFailure("zeroing the check scratch", err);
  q->slots_.resize(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) {
    Slot& s = q->slots_[static_cast<size_t>(i)];
    s.scratch = static_cast<CheckScratch*>(scratch) + i;
    s.results = static_cast<HealthCounts*>(results) + static_cast<size_t>(i) * kMaxTensors;
    s.results_device = static_cast<HealthCounts*>(results_device) + static_cast<size_t>(i) * kMaxTensors;
    cudaEvent_t done = nullptr;
    if (cudaError_t err = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); err != cudaSuccess) {
      return cudaFailure("cudaEventCreate", err);
    }
    s.done.reset(done);
  }
  return q;
}

HealthCheckQueue::~HealthCheckQueue() {
  // Only after drain(): nothing is in flight. Errors are ignored, the process may be exiting.
  // Dropped here, not as members after this body, so they are freed on the queue's device.
  DeviceScope scope(device_);
  slots_.clear();
  buffers_.reset();
}

Status HealthCheckQueue::submit(const TensorView* views, int count, void* stream, uint64_t token,
                                const Ready& overflow) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ == slots_.size()) {
    // Every slot is busy: the GPU is far behind the host. Wait for the oldest check; callers
    // are told through forcedWaits().
    ++forced_waits_;
    collectLocked(overflow, /*wait=*/true, /*limit=*/1);
  }
  Slot& s = slots_[(head_ + in_flight_) % slots_.size()];
  for (int i = 0; i < count; ++i) s.results[i].written = 0;
  DeviceScope scope(device_);
  if (int err = launchHealthCheck(views, count, s.scratch, s.results_device, stream); err != 0) {
    return cudaFailure("health check launch", static_cast<cudaError_t>(err));
  }
  if (cudaError_t err = cudaEventRecord(s.done.get(), static_cast<cudaStream_t>(stream)); err != cudaSuccess) {
    return cudaFailure("cudaEventRecord", err);
  }
  s.token = token;
  s.count = count;
  ++in_flight_;
  return Status::Ok();
}

int HealthCheckQueue::collectLocked(const Ready& ready, bool wait, int limit) {
  int n = 0;
  while (in_flight_ > 0 && n < limit) {
    Slot& s = slots_[head_];
    // The check's own flags first: its last block sets them once its counts and scratch resets
    // are visible here, so a finished check costs no driver call (cudaEventQuery: 1.3 us on the
    // H200, bench/check_completion.cpp). The event is asked only for a check not yet flagged:
    // still running, or failed on the device (it never flags then).
    bool ok = flagged(s);
    if (!ok) {
      cudaError_t state = wait ? cudaEventSynchronize(s.done.get()) : cudaEventQuery(s.done.get());
      if (state == cudaErrorNotReady) break;
      // On any other error the counts cannot be trusted: hand the slot over with count 0.
      ok = state == cudaSuccess && flagged(s);
    }
    ready(s.token, s.results, ok ? s.count : 0);
    head_ = (head_ + 1) % slots_.size();
    --in_flight_;
    ++n;
  }
  return n;
}

int HealthCheckQueue::collect(const Ready& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  return collectLocked(ready, false, kAll);
}

int HealthCheckQueue::drain(const Ready& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  return collectLocked(ready, true, kAll);
}

int64_t HealthCheckQueue::forcedWaits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return forced_waits_;
}

}  // namespace nanprov::kernels
