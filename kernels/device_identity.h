// What names one GPU to the people who run the machine, read through the CUDA runtime: its UUID
// as `nvidia-smi -L` prints it, its PCI bus id, the NVIDIA driver and the CUDA driver API. The
// probes read it once per process and device (probes/libtorch: environmentOf), never on a call's
// path: none of these calls waits for the device. No LibTorch.
#pragma once

#include <string>
#include <string_view>

namespace nanprov::kernels {

struct GpuIdentity {
  std::string uuid;         // "GPU-5e2c1f0a-1b2c-3d4e-5f60-718293a4b5c6"; "" when the runtime does not say
  std::string pci_bus_id;   // "0000:19:00.0"
  std::string driver;       // the NVIDIA kernel module, "580.65.06" (/proc/driver/nvidia/version); "" when unreadable
  std::string cuda_driver;  // the CUDA driver API the installed driver offers, "13.0"
};

// Read once per device and kept; an index the runtime does not know gives an empty identity.
GpuIdentity gpuIdentity(int device);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from the 16 bytes of a cudaUUID_t.
std::string uuidText(const unsigned char (&bytes)[16]);

// The driver's version from the text of /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX
// x86_64 Kernel Module  535.104.05  Sat Aug ..." or "... Open Kernel Module for x86_64  580.65.06
// Release Build ..."): the first dotted number after "Kernel Module"; "" when there is none.
std::string nvidiaDriverVersion(std::string_view proc_text);

}  // namespace nanprov::kernels
