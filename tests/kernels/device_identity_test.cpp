#include "kernels/device_identity.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <regex>

namespace nanprov::kernels {
namespace {

// Both ways /proc/driver/nvidia/version names the kernel module (proprietary and open).
TEST(DeviceIdentity, TheDriverVersionIsReadFromEitherModuleLine) {
  EXPECT_EQ(
      nvidiaDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
                          "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
      "535.104.05");
  EXPECT_EQ(nvidiaDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
                                "(dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n"),
            "580.65.06");
  EXPECT_EQ(nvidiaDriverVersion(""), "");
  EXPECT_EQ(nvidiaDriverVersion("NVRM version: something else 1.2\n"), "") << "no module line: not guessed";
  EXPECT_EQ(nvidiaDriverVersion("Kernel Module for x86_64\nGCC version: 12.2.0\n"), "") << "only the module's own line";
}

TEST(DeviceIdentity, TheUuidIsWrittenAsNvidiaSmiWritesIt) {
  const unsigned char bytes[16] = {0x5e, 0x2c, 0x1f, 0x0a, 0x1b, 0x2c, 0x3d, 0x4e,
                                   0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6};
  EXPECT_EQ(uuidText(bytes), "GPU-5e2c1f0a-1b2c-3d4e-5f60-718293a4b5c6");
}

TEST(DeviceIdentity, EveryVisibleGpuHasItsIdentity) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU";
  const GpuIdentity id = gpuIdentity(0);
  EXPECT_TRUE(std::regex_match(id.uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")))
      << id.uuid;
  EXPECT_TRUE(std::regex_match(id.pci_bus_id, std::regex("[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\\.[0-9]")))
      << id.pci_bus_id;
  EXPECT_TRUE(std::regex_match(id.cuda_driver, std::regex("[0-9]+\\.[0-9]+"))) << id.cuda_driver;
  EXPECT_FALSE(id.driver.empty()) << "a machine with a GPU has /proc/driver/nvidia/version";
  EXPECT_EQ(gpuIdentity(0).uuid, id.uuid) << "kept";
  EXPECT_EQ(gpuIdentity(devices + 3).uuid, "") << "an index the runtime does not know";
}

}  // namespace
}  // namespace nanprov::kernels
