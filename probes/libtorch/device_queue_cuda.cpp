// DeviceQueue built with the CUDA toolkit: kernels::HealthCheckQueue, whose every check is a
// launch of nanprov's own kernels (kernels/health_check.cu).
#include "probes/libtorch/device_queue.h"

#include <utility>

#include "kernels/health_check_queue.h"

namespace nanprov {
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

}  // namespace

StatusOr<std::unique_ptr<DeviceQueue>> DeviceQueue::create(int device, int slots, kernels::CheckKind kind) {
  NANPROV_ASSIGN_OR_RETURN(std::unique_ptr<kernels::HealthCheckQueue> queue,
                           kernels::HealthCheckQueue::create(device, slots, kind));
  return std::unique_ptr<DeviceQueue>(std::make_unique<CudaDeviceQueue>(std::move(queue)));
}

bool deviceReads(const kernels::TensorView& view) { return kernels::checkable(view); }

bool streamCapturing(void* stream) { return kernels::streamIsCapturing(stream); }

}  // namespace nanprov
