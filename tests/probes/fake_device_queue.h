// FakeDeviceQueue: a DeviceQueue (probes/libtorch/device_queue.h) for CPU tests of DeviceChecks.
// It launches nothing: each submit is remembered, and its slot finishes only when the test says
// so (FakeDevice::finish), with the counts the test gives. Collecting hands on what finished;
// draining hands over what did not as failed (no counts) and counts it unfinished, as the real queue does once its
// deadline passed. Test-only: the probes make their queues through DeviceQueue::create.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/health_check.h"
#include "probes/libtorch/device_queue.h"

namespace nanprov::testing {

struct FakeLaunch {
  int device = -1;
  kernels::CheckKind kind = kernels::CheckKind::kFused;
  uint64_t token = 0;
  int count = 0;  // views or dense tensors launched
  bool finished = false;
  bool handed = false;  // handed to the collector
  std::vector<kernels::HealthCounts> counts;
};

// Every queue the factory made and every launch into them, shared with the test.
class FakeDevice {
 public:
  // The factory DeviceChecks is handed: a queue of `slots` on any device, or an error for a
  // device the test marked as having none.
  probes::DeviceQueueFactory factory();
  void failDevice(int device) { failed_device_ = device; }
  void failSubmits(bool fail) { fail_submits_ = fail; }

  int queuesMade() const;
  std::vector<FakeLaunch> launches() const;
  // Finishes launch `i` (in submit order) with `counts`, one per view (fewer: a failed check).
  void finish(size_t i, std::vector<kernels::HealthCounts> counts);
  // Finishes launch `i` with zero counts for each of its views (clean tensors).
  void finishClean(size_t i);

 private:
  friend class FakeDeviceQueue;
  mutable std::mutex mu_;
  std::vector<FakeLaunch> launches_;
  int queues_ = 0;
  int failed_device_ = -1;
  bool fail_submits_ = false;
};

class FakeDeviceQueue final : public probes::DeviceQueue {
 public:
  FakeDeviceQueue(FakeDevice& device, int index, int slots, kernels::CheckKind kind)
      : device_(device), index_(index), slots_(slots), kind_(kind) {}

  int reserve(const Ready& overflow) override;
  Status submit(const kernels::TensorView* views, int count, void* stream, uint64_t token) override;
  Status submitDense(const kernels::DenseTensor* tensors, int count, void* stream, uint64_t token) override;
  int collect(const Ready& ready, bool patient) override;
  int drain(const Ready& ready, Clock::time_point deadline, int* unfinished) override;
  int64_t forcedWaits() const override { return 0; }
  int slots() const override { return slots_; }

 private:
  Status launch(int count, uint64_t token);

  FakeDevice& device_;
  const int index_;  // the device
  const int slots_;
  const kernels::CheckKind kind_;
  int next_ = 0;
};

}  // namespace nanprov::testing
