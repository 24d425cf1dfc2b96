#include "base/records/device_identity.h"

namespace nanprov {

DeviceIdentity DeviceIdentity::forDevice(const Device& call_device) const {
  const std::string name = call_device.name();
  if (device == name) return *this;
  return DeviceIdentity{.host = host, .device = name};
}

std::string deviceIdentityText(const DeviceIdentity& id) {
  std::string out;
  auto add = [&out](const std::string& prefix, const std::string& value) {
    if (value.empty()) return;
    out += (out.empty() ? "" : ", ") + prefix + value;
  };
  add("host ", id.host);
  add("", id.device + (id.gpu.empty() ? "" : " " + id.gpu));
  add("", id.gpu_uuid);
  add("PCI ", id.pci_bus_id);
  add("driver ", id.driver.empty() && !id.cuda_driver.empty() ? "CUDA " + id.cuda_driver : id.driver);
  add("cuDNN ", id.cudnn);
  return out;
}

}  // namespace nanprov
