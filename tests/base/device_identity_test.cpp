#include "base/records/device_identity.h"

#include <gtest/gtest.h>

#include "tests/base/sample_device_identity.h"

namespace nanprov {
namespace {

const DeviceIdentity& kGpu = testing::kSampleGpu;

TEST(DeviceIdentity, TheTextNamesTheHostTheGpuAndItsVersions) {
  EXPECT_EQ(deviceIdentityText(kGpu),
            "host node17, cuda:0 NVIDIA H200 (sm_90), GPU-5e2c1f0a-1b2c-3d4e-5f60-718293a4b5c6, PCI 00000000:19:00.0, "
            "driver 580.65.06, cuDNN 91900");
  EXPECT_EQ(deviceIdentityText({.host = "vm", .device = "cpu"}), "host vm, cpu");
  EXPECT_EQ(deviceIdentityText({}), "");
  DeviceIdentity no_module = kGpu;
  no_module.driver.clear();
  EXPECT_NE(deviceIdentityText(no_module).find("driver CUDA 13.0"), std::string::npos)
      << "the CUDA driver API, where the module's is unread";
}

// A rank's GPU facts describe one device: a call on another is named by its host and device
// alone, never by the other GPU's UUID.
TEST(DeviceIdentity, TheGpuFactsHoldOnlyForTheDeviceTheyDescribe) {
  EXPECT_EQ(kGpu.forDevice(Device::cuda(0)).gpu_uuid, kGpu.gpu_uuid);
  const DeviceIdentity other = kGpu.forDevice(Device::cuda(1));
  EXPECT_EQ(other.host, "node17");
  EXPECT_EQ(other.device, "cuda:1");
  EXPECT_EQ(other.gpu_uuid, "");
  EXPECT_EQ(other.driver, "");
  // A store older than the record names its host only: the call's device comes from the call.
  const DeviceIdentity old = DeviceIdentity{.host = "vm"}.forDevice(Device::cpu());
  EXPECT_EQ(deviceIdentityText(old), "host vm, cpu");
}

}  // namespace
}  // namespace nanprov
