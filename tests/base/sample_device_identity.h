// One GPU's identity as a rank records it (base/records/device_identity.h), for the tests that
// print or judge one: the same node in every test, so their expected texts agree.
#pragma once

#include "base/records/device_identity.h"

namespace nanprov::testing {

inline const DeviceIdentity kSampleGpu{.host = "node17",
                                       .device = "cuda:0",
                                       .gpu = "NVIDIA H200 (sm_90)",
                                       .gpu_uuid = "GPU-5e2c1f0a-1b2c-3d4e-5f60-718293a4b5c6",
                                       .pci_bus_id = "00000000:19:00.0",
                                       .driver = "580.65.06",
                                       .cuda_driver = "13.0",
                                       .cudnn = "91900"};

}  // namespace nanprov::testing
