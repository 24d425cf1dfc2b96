#include "kernels/health_check_queue.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "base/scoped_resource.h"
#include "kernels/cuda_support.h"

namespace nanprov::kernels {
namespace {

constexpr int kAll = 1 << 30;

// Owners of what a queue allocates. Each frees on the device that is current when it is
// dropped, so the queue's destructor drops them inside a DeviceScope.
using DeviceMemory = ScopedResource<void*, &cudaFree>;
using MappedHostMemory = ScopedResource<void*, &cudaFreeHost>;

}  // namespace

struct HealthCheckQueue::Buffers {
  DeviceMemory scratch;      // every slot's CheckScratch (DenseScratch)
  MappedHostMemory results;  // every slot's HealthCounts, mapped into the device
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
  void* scratch = nullptr;          // device: a CheckScratch (DenseScratch in a dense queue)
  HealthCounts* results = nullptr;  // host view of the mapped results
  HealthCounts* results_device = nullptr;
  void* stream = nullptr;  // where the check ran: asked only when waiting for it
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

StatusOr<std::unique_ptr<HealthCheckQueue>> HealthCheckQueue::create(int device, int slots, CheckKind kind) {
  int devices = 0;
  if (cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess) {
    return cudaFailure("no usable CUDA device", err);
  }
  if (device < 0 || device >= devices)
    return Status::Error("CUDA device " + std::to_string(device) + " does not exist");
  if (slots < 1) return Status::Error("a health check queue needs at least one slot");
  DeviceScope scope(device);
  std::unique_ptr<HealthCheckQueue> q(new HealthCheckQueue());
  q->device_ = device;
  q->kind_ = kind;
  const bool dense = kind == CheckKind::kDense;
  q->wave_ = dense ? residentDenseBlocks(device) : residentBlocks(device);
  q->buffers_ = std::make_unique<Buffers>();
  const size_t per_slot_scratch = dense ? sizeof(DenseScratch) : sizeof(CheckScratch);
  const size_t per_slot_results = dense ? kMaxDense : kMaxTensors;
  size_t scratch_bytes = per_slot_scratch * static_cast<size_t>(slots);
  size_t result_bytes = sizeof(HealthCounts) * per_slot_results * static_cast<size_t>(slots);
  void* scratch = nullptr;
  if (cudaError_t err = cudaMalloc(&scratch, scratch_bytes); err != cudaSuccess) return cudaFailure("cudaMalloc", err);
  q->buffers_->scratch.reset(scratch);
  // Zeroed once; every check leaves its scratch zeroed again.
  if (cudaError_t err = cudaMemset(scratch, 0, scratch_bytes); err != cudaSuccess)
    return cudaFailure("cudaMemset", err);
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
  if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess)
    return cudaFailure("zeroing the check scratch", err);
  q->slots_.resize(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) {
    Slot& s = q->slots_[static_cast<size_t>(i)];
    s.scratch = static_cast<char*>(scratch) + static_cast<size_t>(i) * per_slot_scratch;
    s.results = static_cast<HealthCounts*>(results) + static_cast<size_t>(i) * per_slot_results;
    s.results_device = static_cast<HealthCounts*>(results_device) + static_cast<size_t>(i) * per_slot_results;
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

int HealthCheckQueue::slots() const { return static_cast<int>(slots_.size()); }

int64_t HealthCheckQueue::inFlight() const {
  // head_ first: it never passes a tail_ read after it, so the difference cannot go negative.
  const uint64_t head = head_.load(std::memory_order_acquire);
  return static_cast<int64_t>(tail_.load(std::memory_order_acquire) - head);
}

int HealthCheckQueue::reserve(const Ready& overflow) {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  while (tail - head_.load(std::memory_order_acquire) >= slots_.size()) {
    // Every slot is busy. Checks that finished go first, without waiting; only when none has (the
    // GPU is far behind the host) wait for the oldest, and count it. A collector that freed a slot
    // meanwhile spares both.
    claim(/*patient=*/true);
    if (tail - head_.load(std::memory_order_acquire) >= slots_.size()) collectClaimed(overflow, /*wait=*/false, kAll);
    if (tail - head_.load(std::memory_order_acquire) >= slots_.size()) {
      ++forced_waits_;
      collectClaimed(overflow, /*wait=*/true, /*limit=*/1);
    }
    release();
  }
  return static_cast<int>(tail % slots_.size());
}

HealthCheckQueue::Slot* HealthCheckQueue::nextSlot(int count) {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  if (tail - head_.load(std::memory_order_acquire) >= slots_.size()) return nullptr;
  Slot& s = slots_[tail % slots_.size()];
  for (int i = 0; i < count; ++i) s.results[i].written = 0;
  return &s;
}

void HealthCheckQueue::publish(Slot& s, void* stream, uint64_t token, int count) {
  s.stream = stream;
  s.token = token;
  s.count = count;
  tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // the collectors' from here
}

template <typename Launch>
Status HealthCheckQueue::submitWith(CheckKind kind, int count, void* stream, uint64_t token, Launch&& launch) {
  const bool dense = kind == CheckKind::kDense;
  const char* what = dense ? "dense check" : "fused check";
  if (kind_ != kind) return Status::Error(std::string("a ") + what + " submitted to a queue of the other kind");
  const int most = dense ? kMaxDense : kMaxTensors;
  if (count <= 0 || count > most)
    return Status::Error(std::string("a ") + what + " takes 1 to " + std::to_string(most));
  Slot* s = nextSlot(count);
  if (!s) return Status::Error("no free slot: reserve() first");
  DeviceScope scope(device_);
  if (int err = launch(*s); err != 0) return cudaFailure(what, static_cast<cudaError_t>(err));
  publish(*s, stream, token, count);
  return Status::Ok();
}

Status HealthCheckQueue::submit(const TensorView* views, int count, void* stream, uint64_t token) {
  return submitWith(CheckKind::kFused, count, stream, token, [&](Slot& s) {
    return launchHealthCheck(views, count, static_cast<CheckScratch*>(s.scratch), s.results_device, stream, wave_);
  });
}

Status HealthCheckQueue::submitDense(const DenseTensor* tensors, int count, void* stream, uint64_t token) {
  return submitWith(CheckKind::kDense, count, stream, token, [&](Slot& s) {
    return launchDenseCheck(tensors, count, static_cast<DenseScratch*>(s.scratch), s.results_device, stream, wave_);
  });
}

Status HealthCheckQueue::submit(const TensorView* views, int count, void* stream, uint64_t token,
                                const Ready& overflow) {
  reserve(overflow);
  return submit(views, count, stream, token);
}

bool HealthCheckQueue::claim(bool patient) {
  while (collecting_.exchange(true, std::memory_order_acquire)) {
    if (!patient) return false;
    std::this_thread::yield();
  }
  return true;
}

// Waits until `s` is flagged, or known never to be, or `deadline` passed. The flags are polled
// first; the stream is asked only after a millisecond (a check that failed on the device never
// flags), and never while it is capturing a graph: a query would invalidate the user's capture.
HealthCheckQueue::Wait HealthCheckQueue::waitFor(const Slot& s, Clock::time_point deadline) const {
  auto asked = Clock::now();
  while (!flagged(s)) {
    auto now = Clock::now();
    if (now >= deadline) return Wait::kTimedOut;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    now = Clock::now();
    if (now - asked < std::chrono::milliseconds(1) || streamIsCapturing(s.stream)) continue;
    asked = now;
    DeviceScope scope(device_);
    cudaError_t state = cudaStreamQuery(static_cast<cudaStream_t>(s.stream));
    if (state == cudaErrorNotReady) continue;
    // The stream ran everything up to now, the check included: flagged, or failed.
    return state == cudaSuccess && flagged(s) ? Wait::kFlagged : Wait::kFailed;
  }
  return Wait::kFlagged;
}

int HealthCheckQueue::collectClaimed(const Ready& ready, bool wait, int limit, Clock::time_point deadline,
                                     int* unfinished) {
  int n = 0;
  uint64_t head = head_.load(std::memory_order_relaxed);
  const uint64_t tail = tail_.load(std::memory_order_acquire);
  for (; head != tail && n < limit; ++head, ++n) {
    Slot& s = slots_[head % slots_.size()];
    // The check's own flags: its last block sets them once its counts and scratch resets are
    // visible here, so a finished check costs no driver call (an event query would cost 1.3 us on
    // the H200, bench/check_completion.cpp).
    bool ok = flagged(s);
    if (!ok) {
      if (!wait) break;
      // On a failure the counts cannot be trusted: handed over with count 0.
      const Wait waited = waitFor(s, deadline);
      ok = waited == Wait::kFlagged;
      if (waited == Wait::kTimedOut && unfinished) ++*unfinished;
    }
    ready(s.token, s.results, ok ? s.count : 0);
    head_.store(head + 1, std::memory_order_release);  // the producer may reuse the slot
  }
  return n;
}

int HealthCheckQueue::collect(const Ready& ready, bool patient) {
  // Nothing in flight, or the oldest not finished: nothing to claim. (A peek without the claim:
  // another collector may be handing that slot over and the producer refilling it, so what it
  // reads may be stale, which costs at most one claimed pass that finds nothing.)
  const uint64_t head = head_.load(std::memory_order_acquire);
  if (head == tail_.load(std::memory_order_acquire) || !flagged(slots_[head % slots_.size()])) return 0;
  if (!claim(patient)) return 0;
  int n = collectClaimed(ready, /*wait=*/false, kAll);
  release();
  return n;
}

int HealthCheckQueue::drain(const Ready& ready, Clock::time_point deadline, int* unfinished) {
  claim(/*patient=*/true);
  int n = collectClaimed(ready, /*wait=*/true, kAll, deadline, unfinished);
  release();
  return n;
}

}  // namespace nanprov::kernels
