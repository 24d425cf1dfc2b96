#include "tests/probes/fake_cuda.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace nanprov::testing {
namespace {

// Streams of a CUDA device that is not there: enough for DeviceChecks to ask for the current
// stream and its handle. Registered for the whole binary (a CPU build of torch has no CUDA guard).
struct FakeCudaGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  c10::Device exchangeDevice(c10::Device d) const override { return d; }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::CUDA, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override { return c10::Stream(c10::Stream::UNSAFE, d, 0); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void* getStreamNativeHandle(const c10::Stream s) const override {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + s.id()));
  }
};
C10_REGISTER_GUARD_IMPL(CUDA, FakeCudaGuard);

}  // namespace

at::Tensor fakeCuda(std::vector<float>& host, std::vector<int64_t> sizes, std::vector<int64_t> strides, int device) {
  c10::Device where(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  c10::Storage storage(c10::Storage::use_byte_size_t(), host.size() * sizeof(float), c10::DataPtr(host.data(), where),
                       nullptr, false);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA), caffe2::TypeMeta::Make<float>());
  if (strides.empty()) t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  else t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return t;
}

}  // namespace nanprov::testing
