#include <cuda_runtime.h>

#include "tests/kernels/stuck_stream.h"

namespace nanprov::kernels::fixtures {
namespace {

// One thread reading host-mapped memory until the host writes it: the stream is stuck until then.
__global__ void spinUntilSet(const volatile int* flag) {
  while (*flag == 0) {
  }
}

}  // namespace

StuckStream::StuckStream() {
  int* device_flag = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaHostAlloc(reinterpret_cast<void**>(&flag_), sizeof(int), cudaHostAllocMapped) != cudaSuccess) return;
  *flag_ = 0;
  if (cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), flag_, 0) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    return;
  }
  stream_ = stream;
  spinUntilSet<<<1, 1, 0, stream>>>(device_flag);
  ok_ = cudaGetLastError() == cudaSuccess;
}

bool StuckStream::release(bool wait) {
  if (flag_) *static_cast<volatile int*>(flag_) = 1;
  return !wait || !stream_ || cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)) == cudaSuccess;
}

StuckStream::~StuckStream() {
  release(/*wait=*/true);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (flag_) cudaFreeHost(flag_);
}

}  // namespace nanprov::kernels::fixtures
