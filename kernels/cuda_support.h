// What the kernels' host code shares: a CUDA failure as a Status, and a scope that makes one
// device current. Included by .cpp files that use the CUDA runtime only.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "base/status.h"

namespace nanprov::kernels {

inline Status cudaFailure(const char* what, cudaError_t err) {
  return Status::Error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Makes `device` current for a scope and restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      switched_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace nanprov::kernels
