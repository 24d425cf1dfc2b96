// HealthCheckQueue: the fused checks of one CUDA device in flight. Each check gets a slot
// (device scratch, host-mapped results, an event); results are collected once the check has
// flagged them in the mapped results (the event is asked only about checks not yet flagged), so
// no check ever waits for the GPU, except when every slot is taken.
// No LibTorch; thread-safe (forward and backward calls come from different threads).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/health_check.h"
#include "base/status.h"

namespace nanprov::kernels {

// True while `stream` (a cudaStream_t) is capturing a CUDA graph. Nothing may be enqueued or
// queried on it then: a launch would land inside the user's graph, a query would invalidate it.
bool streamIsCapturing(void* stream);

// "NVIDIA H200 (sm_90)"; empty when the device cannot be asked.
std::string deviceDescription(int device);

class HealthCheckQueue {
 public:
  // Allocates `slots` slots on `device`. Fails with a reason when CUDA cannot be used.
  static StatusOr<std::unique_ptr<HealthCheckQueue>> create(int device, int slots);
  ~HealthCheckQueue();
  HealthCheckQueue(const HealthCheckQueue&) = delete;
  HealthCheckQueue& operator=(const HealthCheckQueue&) = delete;

  // `count` is 0 when the check failed on the device and its counts cannot be trusted.
  using Ready = std::function<void(uint64_t token, const HealthCounts* counts, int count)>;

  // Enqueues one fused check on `stream` (a cudaStream_t of this device). `token` comes back
  // with the results. When every slot is in flight it first waits for the oldest check and
  // hands it to `overflow`; that is the only host synchronisation, and it is counted.
  Status submit(const TensorView* views, int count, void* stream, uint64_t token, const Ready& overflow);

  // Hands over every finished check, oldest first, without waiting. Returns how many.
  int collect(const Ready& ready);
  // Waits for every check in flight and hands them over (exit only).
  int drain(const Ready& ready);

  int64_t forcedWaits() const;
  int device() const { return device_; }

 private:
  struct Slot;
  static bool flagged(const Slot& s);
  HealthCheckQueue() = default;
  int collectLocked(const Ready& ready, bool wait, int limit);

  int device_ = 0;
  // Guards the slots. Held while `ready`/`overflow` run, so those must not call back into this
  // queue; they may take their own locks (the callers' locks come after this one).
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  size_t head_ = 0;      // oldest slot in flight
  size_t in_flight_ = 0;
  int64_t forced_waits_ = 0;
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;  // device scratch and host-mapped results of every slot
};

}  // namespace nanprov::kernels
