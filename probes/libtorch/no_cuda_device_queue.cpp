// DeviceQueue built without the CUDA toolkit: nanprov has no kernels to launch, so no queue is
// made and DeviceChecks measures every CUDA tensor on the host (each a counted synchronisation).
// Nothing is ever captured either: no graph check could be captured with it, and no device is
// described beyond what torch says of it.
#include "probes/libtorch/device_queue.h"

namespace nanprov::probes {

StatusOr<std::unique_ptr<DeviceQueue>> DeviceQueue::create(int, int, kernels::CheckKind) {
  return Status::Error("nanprov was built without the CUDA toolkit");
}

bool deviceReads(const kernels::TensorView&) { return true; }

bool streamCapturing(void*) { return false; }

StatusOr<std::unique_ptr<CapturedCheck>> CapturedCheck::capture(int, const kernels::TensorView*, int, void*) {
  return Status::Error("nanprov was built without the CUDA toolkit");
}

bool graphChecksBuilt() { return false; }

uint64_t captureIdOf(void*) { return 0; }

void describeDevice(int, std::map<std::string, std::string>&) {}

}  // namespace nanprov::probes
