// Where a call ran: the CPU, or one CUDA device by index. A value type the training thread fills
// from an integer (no string per call); its text form, "cpu" or "cuda:<index>", is PyTorch's
// and is what the store, the JSON and the capture metadata hold.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nanprov {

enum class DeviceKind { kCpu, kCuda };
const char* deviceKindName(DeviceKind kind);  // "cpu" | "cuda"

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = -1;  // the CUDA ordinal; -1 on the CPU

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceKind::kCuda, index}; }
  // -1 (the CPU) or a CUDA ordinal, as the probes and the kernel records count.
  static Device fromIndex(int index) { return index < 0 ? cpu() : cuda(index); }
  // "cpu" or "cuda:<index>"; nullopt for anything else (a store written by something else).
  static std::optional<Device> parse(std::string_view text);

  bool isCpu() const { return kind == DeviceKind::kCpu; }
  std::string name() const;  // "cpu" | "cuda:<index>"
  bool operator==(const Device&) const = default;
};

}  // namespace nanprov
