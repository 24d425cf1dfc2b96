#include "kernels/graph_check.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>

#include "kernels/cuda_support.h"

namespace nanprov::kernels {
namespace {

// Switches this thread to relaxed capture mode for a scope. In the default (global) and
// thread-local modes a capturing thread may not allocate; relaxed mode lets it, as the caching
// allocator's private pools do. Allocating enqueues nothing on the captured stream.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

uint64_t volatileRead(const unsigned long long& v) { return *static_cast<const volatile unsigned long long*>(&v); }

}  // namespace

uint64_t captureIdOf(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &status, &id) != cudaSuccess) {
    cudaGetLastError();  // not left for the next launch's error check to find
    return 0;
  }
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

StatusOr<std::unique_ptr<GraphCheck>> GraphCheck::capture(int device, const TensorView* views, int count,
                                                          void* stream) {
  if (count <= 0 || count > kMaxTensors)
    return Status::Error("a graph check takes 1 to " + std::to_string(kMaxTensors));
  DeviceScope scope(device);
  std::unique_ptr<GraphCheck> check(new GraphCheck());  // frees what it holds if a step below fails
  check->device_ = device;
  check->count_ = count;
  void* ring_device = nullptr;
  {
    RelaxedCapture relaxed;
    if (cudaError_t err = cudaMalloc(&check->scratch_, sizeof(CheckScratch)); err != cudaSuccess) {
      return cudaFailure("cudaMalloc", err);
    }
    void* ring = nullptr;
    if (cudaError_t err = cudaHostAlloc(&ring, sizeof(GraphRing), cudaHostAllocMapped); err != cudaSuccess) {
      return cudaFailure("cudaHostAlloc", err);
    }
    check->ring_ = static_cast<GraphRing*>(ring);
    std::memset(ring, 0, sizeof(GraphRing));  // host memory: zeroed here, before the graph can run
    if (cudaError_t err = cudaHostGetDevicePointer(&ring_device, ring, 0); err != cudaSuccess) {
      return cudaFailure("cudaHostGetDevicePointer", err);
    }
  }
  if (int err = captureGraphHealthCheck(views, count, static_cast<CheckScratch*>(check->scratch_),
                                        static_cast<GraphRing*>(ring_device), stream, residentBlocks(device));
      err != 0) {
    return cudaFailure("capturing the check", static_cast<cudaError_t>(err));
  }
  return check;
}

GraphCheck::~GraphCheck() {
  DeviceScope scope(device_);
  RelaxedCapture relaxed;  // a failed capture is torn down while its stream may still capture
  if (scratch_) cudaFree(scratch_);
  if (ring_) cudaFreeHost(ring_);
}

uint64_t GraphCheck::replaysRun() const { return volatileRead(ring_->launches); }

// A seqlock read: the device clears an entry's stamp before it overwrites it and stamps it once
// written, so counts copied between two reads of the same stamp are that replay's.
GraphCheck::Replay GraphCheck::read(uint64_t n, HealthCounts* out) const {
  constexpr uint64_t kRing = kGraphRingEntries;
  const uint64_t begun = replaysRun();
  if (begun <= n) return Replay::kPending;
  if (begun > n + kRing) return Replay::kOverwritten;
  const GraphRingEntry& entry = ring_->entries[n % kRing];
  const uint64_t stamp = volatileRead(entry.stamp);
  if (stamp != n + 1) return stamp > n + 1 ? Replay::kOverwritten : Replay::kPending;
  std::atomic_thread_fence(std::memory_order_acquire);
  for (int i = 0; i < count_; ++i) {
    const volatile HealthCounts& c = entry.counts[i];
    out[i].nan = c.nan;
    out[i].posinf = c.posinf;
    out[i].neginf = c.neginf;
    out[i].nonzero = c.nonzero;
    out[i].masked_rows = c.masked_rows;
    out[i].max_abs = c.max_abs;
    out[i].written = 1;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const bool intact = volatileRead(entry.stamp) == n + 1 && replaysRun() <= n + kRing;
  return intact ? Replay::kDone : Replay::kOverwritten;
}

}  // namespace nanprov::kernels
