// DeviceQueue built without the CUDA toolkit: nanprov has no kernels to launch, so no queue is
// made and DeviceChecks measures every CUDA tensor on the host (each a counted synchronisation).
// Nothing is ever captured either: no graph check could be captured with it.
#include "probes/libtorch/device_queue.h"

namespace nanprov {

StatusOr<std::unique_ptr<DeviceQueue>> DeviceQueue::create(int, int, kernels::CheckKind) {
  return Status::Error("nanprov was built without the CUDA toolkit");
}

bool deviceReads(const kernels::TensorView&) { return true; }

bool streamCapturing(void*) { return false; }

}  // namespace nanprov
