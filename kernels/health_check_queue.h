// HealthCheckQueue: the fused checks in flight that one thread enqueued on one CUDA device: a
// ring of slots (device scratch, host-mapped results), with one producer and any number of
// collectors. The producer never takes a lock: it fills the next free slot and publishes it
// with one atomic store. A check is finished once its last block flagged its results in the
// mapped memory, so noticing it costs no driver call; no event is recorded per check either.
// Only a full ring, and drain() at exit, wait for the GPU. No LibTorch.
//
// DeviceChecks gives every submitting thread (the training thread, autograd's device threads)
// its own queue per device, so submitting never contends; collectors of one queue take turns.
//
// `ready` and `overflow` run while their thread holds the queue's collector claim: they must not
// submit to, collect from or drain the same queue (a full ring would wait for a claim its own
// thread holds, forever). They may take their own locks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/health_check.h"

namespace nanprov::kernels {

// True while `stream` (a cudaStream_t) is capturing a CUDA graph. Nothing may be enqueued or
// queried on it then: a launch would land inside the user's graph, a query would invalidate it.
bool streamIsCapturing(void* stream);

// "NVIDIA H200 (sm_90)"; empty when the device cannot be asked.
std::string deviceDescription(int device);

// What a queue's checks are: fused checks of one call's views (submit), or dense checks of many
// dense tensors (submitDense), whose slots are larger.
enum class CheckKind { kFused, kDense };

class HealthCheckQueue {
 public:
  // Allocates `slots` slots on `device` for checks of `kind`. Fails with a reason when CUDA
  // cannot be used.
  static StatusOr<std::unique_ptr<HealthCheckQueue>> create(int device, int slots, CheckKind kind = CheckKind::kFused);
  ~HealthCheckQueue();
  HealthCheckQueue(const HealthCheckQueue&) = delete;
  HealthCheckQueue& operator=(const HealthCheckQueue&) = delete;

  // `count` is 0 when the check failed on the device and its counts cannot be trusted.
  using Ready = std::function<void(uint64_t token, const HealthCounts* counts, int count)>;

  // Producer side: one thread at a time.
  // The slot the next submit() fills, made free first: when every slot is in flight the producer
  // waits for the oldest check and hands it to `overflow`. That is the only host
  // synchronisation, and it is counted (forcedWaits()).
  int reserve(const Ready& overflow);
  // Enqueues one fused check on `stream` (a cudaStream_t of this device) into the slot reserve()
  // made free, and publishes it. `token` comes back with the results.
  Status submit(const TensorView* views, int count, void* stream, uint64_t token);
  // reserve() and submit() at once.
  Status submit(const TensorView* views, int count, void* stream, uint64_t token, const Ready& overflow);
  // As submit(), for a queue of dense checks: launchDenseCheck of `tensors[0..count)`.
  Status submitDense(const DenseTensor* tensors, int count, void* stream, uint64_t token);

  // Collector side: any thread. Hands over every finished check, oldest first, without waiting
  // for the GPU. A collector that finds another collecting skips (returns 0) unless `patient`,
  // when it waits for its turn: callers that poll never block.
  int collect(const Ready& ready, bool patient = false);
  using Clock = std::chrono::steady_clock;
  // Waits for every check in flight and hands them over (exit only), but not past `deadline`: a
  // check still unfinished then (its stream stuck behind a hung collective, say) is handed over
  // as failed, with count 0, and counted in `*unfinished`. Exit must never hang on the GPU.
  int drain(const Ready& ready, Clock::time_point deadline = Clock::time_point::max(), int* unfinished = nullptr);

  int64_t inFlight() const;
  int64_t forcedWaits() const { return forced_waits_.load(std::memory_order_relaxed); }
  int device() const { return device_; }
  int slots() const;

 private:
  struct Slot;
  static bool flagged(const Slot& s);
  HealthCheckQueue() = default;
  bool claim(bool patient);
  void release() { collecting_.store(false, std::memory_order_release); }
  // Hands over up to `limit` checks, oldest first. With `wait`, each unfinished one is waited for
  // until `deadline`; past it, handed over failed and counted in `*unfinished` (when given).
  int collectClaimed(const Ready& ready, bool wait, int limit, Clock::time_point deadline = Clock::time_point::max(),
                     int* unfinished = nullptr);
  enum class Wait { kFlagged, kFailed, kTimedOut };
  Wait waitFor(const Slot& s, Clock::time_point deadline) const;
  // The slot reserve() made free, its flags reset for `count` results; nullptr when none is.
  Slot* nextSlot(int count);
  // Checks `count` against `kind`'s bounds, launches into the next slot with launch(slot) (a
  // cudaError_t value) on this queue's device, and publishes it.
  template <typename Launch>
  Status submitWith(CheckKind kind, int count, void* stream, uint64_t token, Launch&& launch);
  void publish(Slot& s, void* stream, uint64_t token, int count);

  int device_ = 0;
  CheckKind kind_ = CheckKind::kFused;
  int wave_ = 0;  // the check kernel's resident blocks on device_, asked once
  std::vector<Slot> slots_;
  // Slots [head_, tail_) are in flight (indices count up forever; the slot is index % size).
  // The producer alone moves tail_, the collector holding collecting_ alone moves head_.
  std::atomic<uint64_t> head_{0};
  std::atomic<uint64_t> tail_{0};
  std::atomic<bool> collecting_{false};
  std::atomic<int64_t> forced_waits_{0};
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;  // device scratch and host-mapped results of every slot
};

}  // namespace nanprov::kernels
