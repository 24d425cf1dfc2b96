#include "kernels/device_identity.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>

namespace nanprov::kernels {
namespace {

constexpr int kMaxDevices = 64;

// The driver is the machine's, the same for every device: read once.
const std::string& installedDriver() {
  static const std::string* driver = [] {
    std::ifstream in("/proc/driver/nvidia/version");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return new std::string(nvidiaDriverVersion(text));  // leaked: may be read at exit
  }();
  return *driver;
}

GpuIdentity readIdentity(int device) {
  GpuIdentity id;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return id;
  unsigned char bytes[16];
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
  id.uuid = uuidText(bytes);
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) == cudaSuccess) {
    id.pci_bus_id = bus;
  } else {
    std::snprintf(bus, sizeof bus, "%08x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    id.pci_bus_id = bus;
  }
  int version = 0;
  if (cudaDriverGetVersion(&version) == cudaSuccess && version > 0) {
    id.cuda_driver = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  }
  id.driver = installedDriver();
  return id;
}

}  // namespace

GpuIdentity gpuIdentity(int device) {
  static std::mutex mu;
  static auto* known = new std::array<GpuIdentity, kMaxDevices>();  // leaked, as installedDriver
  static std::array<bool, kMaxDevices> read{};
  if (device < 0 || device >= kMaxDevices) return readIdentity(device);
  std::lock_guard<std::mutex> lock(mu);
  if (!read[device]) {
    (*known)[device] = readIdentity(device);
    read[device] = !(*known)[device].uuid.empty();  // a failed read is tried again next time
  }
  return (*known)[device];
}

std::string uuidText(const unsigned char (&bytes)[16]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0xf];
  }
  return out;
}

std::string nvidiaDriverVersion(std::string_view text) {
  const size_t at = text.find("Kernel Module");
  if (at == std::string_view::npos) return "";
  const std::string_view line = text.substr(at, text.find('\n', at) - at);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t end = i;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    const std::string_view word = line.substr(i, end - i);
    bool dotted = !word.empty() && std::isdigit(static_cast<unsigned char>(word.front())) &&
                  std::isdigit(static_cast<unsigned char>(word.back())) && word.find('.') != std::string_view::npos;
    for (char c : word) dotted = dotted && (std::isdigit(static_cast<unsigned char>(c)) || c == '.');
    if (dotted) return std::string(word);
    i = end;
  }
  return "";
}

}  // namespace nanprov::kernels
