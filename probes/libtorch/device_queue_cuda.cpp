// DeviceQueue built with the CUDA toolkit: kernels::HealthCheckQueue, whose every check is a
// launch of nanprov's own kernels (kernels/health_check.cu); CapturedCheck, kernels::GraphCheck;
// the device's description, kernels::deviceDescription and kernels::gpuIdentity.
#include <utility>

#include "base/records/device_identity.h"
#include "kernels/device_identity.h"
#include "kernels/graph_check.h"
#include "kernels/health_check_queue.h"
#include "probes/libtorch/device_queue.h"

namespace nanprov::probes {
namespace {

class CudaDeviceQueue final : public DeviceQueue {
 public:
  explicit CudaDeviceQueue(std::unique_ptr<kernels::HealthCheckQueue> queue) : queue_(std::move(queue)) {}

  int reserve(const Ready& overflow) override { return queue_->reserve(overflow); }
  Status submit(const kernels::TensorView* views, int count, void* stream, uint64_t token) override {
    return queue_->submit(views, count, stream, token);
  }
  Status submitDense(const kernels::DenseTensor* tensors, int count, void* stream, uint64_t token) override {
    return queue_->submitDense(tensors, count, stream, token);
  }
  int collect(const Ready& ready, bool patient) override { return queue_->collect(ready, patient); }
  int drain(const Ready& ready, Clock::time_point deadline, int* unfinished) override {
    return queue_->drain(ready, deadline, unfinished);
  }
  int64_t forcedWaits() const override { return queue_->forcedWaits(); }
  int slots() const override { return queue_->slots(); }

 private:
  std::unique_ptr<kernels::HealthCheckQueue> queue_;
};

class CudaCapturedCheck final : public CapturedCheck {
 public:
  explicit CudaCapturedCheck(std::unique_ptr<kernels::GraphCheck> check) : check_(std::move(check)) {}

  Replay read(uint64_t n, kernels::HealthCounts* out) const override {
    switch (check_->read(n, out)) {
      case kernels::GraphCheck::Replay::kPending: return Replay::kPending;
      case kernels::GraphCheck::Replay::kDone: return Replay::kDone;
      case kernels::GraphCheck::Replay::kOverwritten: return Replay::kOverwritten;
    }
    return Replay::kPending;
  }
  int count() const override { return check_->count(); }

 private:
  std::unique_ptr<kernels::GraphCheck> check_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceQueue>> DeviceQueue::create(int device, int slots, kernels::CheckKind kind) {
  NANPROV_ASSIGN_OR_RETURN(std::unique_ptr<kernels::HealthCheckQueue> queue,
                           kernels::HealthCheckQueue::create(device, slots, kind));
  return std::unique_ptr<DeviceQueue>(std::make_unique<CudaDeviceQueue>(std::move(queue)));
}

bool deviceReads(const kernels::TensorView& view) { return kernels::checkable(view); }

bool streamCapturing(void* stream) { return kernels::streamIsCapturing(stream); }

StatusOr<std::unique_ptr<CapturedCheck>> CapturedCheck::capture(int device, const kernels::TensorView* views, int count,
                                                                void* stream) {
  NANPROV_ASSIGN_OR_RETURN(std::unique_ptr<kernels::GraphCheck> check,
                           kernels::GraphCheck::capture(device, views, count, stream));
  return std::unique_ptr<CapturedCheck>(std::make_unique<CudaCapturedCheck>(std::move(check)));
}

bool graphChecksBuilt() { return true; }

uint64_t captureIdOf(void* stream) { return kernels::captureIdOf(stream); }

void describeDevice(int device, std::map<std::string, std::string>& meta) {
  meta[kMetaGpu] = kernels::deviceDescription(device);
  // Which GPU of which machine, for the report's "this node" (base/records/device_identity.h);
  // read once per device, and asking waits for nothing on it.
  const kernels::GpuIdentity id = kernels::gpuIdentity(device);
  for (const auto& [key, value] : {std::pair{kMetaGpuUuid, &id.uuid}, std::pair{kMetaPciBusId, &id.pci_bus_id},
                                   std::pair{kMetaDriver, &id.driver}, std::pair{kMetaCudaDriver, &id.cuda_driver}}) {
    meta[key] = *value;  // empty too: a value of the device described before must not stay
  }
}

}  // namespace nanprov::probes
