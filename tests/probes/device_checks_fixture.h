// DeviceChecks on the CPU, its CUDA path included (device_checks_test.cpp, forward_checks_test.cpp):
// a fake DeviceQueue (fake_device_queue.h) finishes slots when the test says so, a fake CUDA
// device guard gives streams, and "CUDA" tensors are host memory the kernel never reads.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "probes/core/session.h"
#include "probes/libtorch/device_checks.h"
#include "tests/probes/fake_cuda.h"
#include "tests/probes/fake_device_queue.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::testing {

// Exit's wait for checks in flight (read once per process): nothing waits in a test.
inline const bool kNoExitWait = (setenv("NANPROV_EXIT_WAIT_SECONDS", "0", 1), true);

struct Recorded {
  CallEvent rec;
  size_t held = 0;
};

class Sink final : public probes::CheckedCallSink {
 public:
  std::vector<Recorded> records() {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

 private:
  void recordChecked(CallEvent rec, const probes::RoleTensors& tensors, const probes::CallArgs&, const char*) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back({std::move(rec), tensors.size()});
  }
  std::mutex mu_;
  std::vector<Recorded> records_;
};

class DeviceChecksTest : public ::testing::Test {
 protected:
  // NANPROV_DEFER_CHECKS for the checks made next.
  void make(const char* defer = "0") {
    setenv("NANPROV_DEFER_CHECKS", defer, 1);
    checks_ = std::make_unique<probes::DeviceChecks>(session_, *tracer_, sink_, fake_.factory());
  }

  CallEvent call(int device, int64_t layer = 0) {
    CallEvent rec;
    rec.op = "aten::_scaled_dot_product_flash_attention";
    rec.backend = "flash";
    rec.layer = layer;
    rec.device = Device::fromIndex(device);
    return rec;
  }

  probes::RoleTensors qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    probes::RoleTensors t;
    t.emplace_back(Role::kQ, q);
    t.emplace_back(Role::kK, k);
    t.emplace_back(Role::kV, v);
    return t;
  }

  probes::Session session_;
  std::unique_ptr<KernelTracer> tracer_ = KernelTracer::create();
  Sink sink_;
  FakeDevice fake_;
  std::unique_ptr<probes::DeviceChecks> checks_;
  std::vector<float> q_ = std::vector<float>(8), k_ = std::vector<float>(8), v_ = std::vector<float>(8);
};

inline kernels::HealthCounts counts(unsigned long long nan, float max_abs) {
  kernels::HealthCounts c{};
  c.nan = nan;
  c.nonzero = 1;
  c.max_abs = max_abs;
  return c;
}

}  // namespace nanprov::testing
