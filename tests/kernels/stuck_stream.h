// A stream stuck behind a kernel that never ends on its own, as one is behind a hung collective:
// what the health check queue must not wait for past its deadline at exit.
#pragma once

namespace nanprov::kernels::fixtures {

// Enqueues on `stream` (a cudaStream_t) a kernel that spins until the int behind `device_flag`
// (the device pointer of host-mapped memory) is nonzero. Returns a cudaError_t value.
int launchSpinUntilSet(const int* device_flag, void* stream);

}  // namespace nanprov::kernels::fixtures
