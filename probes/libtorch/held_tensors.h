// HeldTensors: the tensors DeviceChecks holds until their check's results are known, within a
// byte budget (NANPROV_HOLD_BYTES, 2 GiB by default). Beyond it a call's tensors are not held:
// their memory is marked in use on the check's stream instead, so the caching allocator does
// not reuse it under the check. Releasing what was held is counted, with the storages whose last
// reference nanprov held (the frees autograd would have made without it).
#pragma once

#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>

#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {

class HeldTensors {
 public:
  HeldTensors();  // the budget from NANPROV_HOLD_BYTES
  HeldTensors(const HeldTensors&) = delete;
  HeldTensors& operator=(const HeldTensors&) = delete;

  // Counts `bytes` as held when they fit the budget; false, nothing counted, when they do not.
  // Decided without a lock.
  bool tryHold(int64_t bytes) {
    if (held_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes <= budget_) return true;
    held_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    return false;
  }
  void unhold(int64_t bytes) { held_bytes_.fetch_sub(bytes, std::memory_order_relaxed); }
  // True past half the budget: time to collect what finished, so it can be released.
  bool nearBudget() const { return held_bytes_.load(std::memory_order_relaxed) > budget_ / 2; }

  // Over the budget: `tensors` not held, their memory marked in use on `stream`.
  static void markInUse(const RoleTensors& tensors, const c10::Stream& stream);
  // Drops `held` and `args` (IValues that may hold tensors too), counting what was released.
  void release(RoleTensors& held, CallArgs& args);

  // Held tensors released so far, and how many storages their release freed.
  int64_t released() const { return released_.load(std::memory_order_relaxed); }
  int64_t releasedLast() const { return released_last_.load(std::memory_order_relaxed); }

 private:
  const int64_t budget_;
  std::atomic<int64_t> held_bytes_{0};
  std::atomic<int64_t> released_{0};
  std::atomic<int64_t> released_last_{0};
};

}  // namespace nanprov::probes
