#include "tests/probes/fake_device_queue.h"

#include <utility>

namespace nanprov::testing {

probes::DeviceQueueFactory FakeDevice::factory() {
  return [this](int device, int slots, kernels::CheckKind kind) -> StatusOr<std::unique_ptr<probes::DeviceQueue>> {
    std::lock_guard<std::mutex> lock(mu_);
    if (device == failed_device_) return Status::Error("no queue on this fake device");
    ++queues_;
    return std::unique_ptr<probes::DeviceQueue>(std::make_unique<FakeDeviceQueue>(*this, device, slots, kind));
  };
}

int FakeDevice::queuesMade() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queues_;
}

std::vector<FakeLaunch> FakeDevice::launches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return launches_;
}

void FakeDevice::finish(size_t i, std::vector<kernels::HealthCounts> counts) {
  std::lock_guard<std::mutex> lock(mu_);
  launches_.at(i).counts = std::move(counts);
  launches_.at(i).finished = true;
}

void FakeDevice::finishClean(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  launches_.at(i).counts.assign(static_cast<size_t>(launches_.at(i).count), kernels::HealthCounts{});
  launches_.at(i).finished = true;
}

// Slots are taken in turn; a test never has more in flight than a queue's slots.
int FakeDeviceQueue::reserve(const Ready&) {
  const int slot = next_;
  next_ = (next_ + 1) % slots_;
  return slot;
}

Status FakeDeviceQueue::launch(int count, uint64_t token) {
  std::lock_guard<std::mutex> lock(device_.mu_);
  if (device_.fail_submits_) return Status::Error("fake launch failed");
  FakeLaunch l;
  l.device = index_;
  l.kind = kind_;
  l.token = token;
  l.count = count;
  device_.launches_.push_back(std::move(l));
  return Status::Ok();
}

Status FakeDeviceQueue::submit(const kernels::TensorView*, int count, void*, uint64_t token) {
  return launch(count, token);
}

Status FakeDeviceQueue::submitDense(const kernels::DenseTensor*, int count, void*, uint64_t token) {
  return launch(count, token);
}

int FakeDeviceQueue::collect(const Ready& ready, bool) {
  // What finished, handed on outside the lock (the ready callback records calls).
  std::vector<FakeLaunch> done;
  {
    std::lock_guard<std::mutex> lock(device_.mu_);
    for (FakeLaunch& l : device_.launches_) {
      if (l.device != index_ || l.kind != kind_ || !l.finished || l.handed) continue;
      l.handed = true;
      done.push_back(l);
    }
  }
  for (const FakeLaunch& l : done) ready(l.token, l.counts.data(), static_cast<int>(l.counts.size()));
  return static_cast<int>(done.size());
}

int FakeDeviceQueue::drain(const Ready& ready, Clock::time_point, int* unfinished) {
  const int n = collect(ready, true);
  std::vector<uint64_t> given_up;
  {
    std::lock_guard<std::mutex> lock(device_.mu_);
    for (FakeLaunch& l : device_.launches_) {
      if (l.device != index_ || l.kind != kind_ || l.handed) continue;
      l.handed = true;
      given_up.push_back(l.token);
      if (unfinished) ++*unfinished;
    }
  }
  // Handed over as failed (no counts), as the real queue does past its deadline.
  for (const uint64_t token : given_up) ready(token, nullptr, 0);
  return n + static_cast<int>(given_up.size());
}

}  // namespace nanprov::testing
