// Which machine and which GPU a rank ran on, in the words the people who run the cluster act on:
// the host name, the GPU's UUID (as `nvidia-smi -L` prints it) and PCI bus id, the NVIDIA driver
// and the cuDNN library. The probes read it once per process and device, off the hot path, into
// the rank store's meta (the keys below); the reader gives it back per rank, and the report names
// it beside every edge so that "this node" can be excluded. A CPU run has the host and "cpu".
#pragma once

#include <string>

#include "base/records/device.h"

namespace nanprov {

// The rank store's meta keys. "host" and "cudnn" (torch's compile-time cuDNN) and
// "cudnn_loaded" (the library in the process) predate this record and keep their names.
inline constexpr const char* kMetaHost = "host";
inline constexpr const char* kMetaDescribedDevice =
    "described_device";                                        // the device the GPU keys describe: "cpu", "cuda:0"
inline constexpr const char* kMetaGpu = "gpu";                 // "NVIDIA H200 (sm_90)"
inline constexpr const char* kMetaGpuUuid = "gpu_uuid";        // "GPU-5e2c1f0a-..."
inline constexpr const char* kMetaPciBusId = "pci_bus_id";     // "0000:19:00.0"
inline constexpr const char* kMetaDriver = "driver";           // the NVIDIA kernel module, "580.65.06"
inline constexpr const char* kMetaCudaDriver = "cuda_driver";  // the CUDA driver API, "13.0"
inline constexpr const char* kMetaCudnn = "cudnn";
inline constexpr const char* kMetaCudnnLoaded = "cudnn_loaded";

struct DeviceIdentity {
  std::string host;
  std::string device;                                                 // "cpu", "cuda:0"; "" when the store does not say
  std::string gpu, gpu_uuid, pci_bus_id, driver, cuda_driver, cudnn;  // "" when not known (the CPU)

  bool known() const { return !host.empty() || !device.empty(); }
  // The identity as it holds for a call that ran on `call_device`: the rank's GPU facts only when
  // they describe that device (a rank driving two GPUs recorded the first), else the host and
  // the device's name alone, never another GPU's UUID.
  DeviceIdentity forDevice(const Device& call_device) const;
};

// "host node17, cuda:0 NVIDIA H200 (sm_90), GPU-5e2c..., PCI 0000:19:00.0, driver 580.65.06,
// cuDNN 91900"; "host vm, cpu". Empty when nothing is known.
std::string deviceIdentityText(const DeviceIdentity& id);

}  // namespace nanprov
