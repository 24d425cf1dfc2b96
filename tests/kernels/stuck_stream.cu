#include "tests/kernels/stuck_stream.h"

#include <cuda_runtime.h>

namespace nanprov::kernels::fixtures {
namespace {

// One thread reading host-mapped memory until the host writes it: the stream is stuck until then.
__global__ void spinUntilSet(const volatile int* flag) {
  while (*flag == 0) {
  }
}

}  // namespace

int launchSpinUntilSet(const int* device_flag, void* stream) {
  spinUntilSet<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(device_flag);
  return cudaGetLastError();
}

}  // namespace nanprov::kernels::fixtures
