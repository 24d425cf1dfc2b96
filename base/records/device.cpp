#include "base/records/device.h"

#include <charconv>

namespace nanprov {

const char* deviceKindName(DeviceKind kind) { return kind == DeviceKind::kCuda ? "cuda" : "cpu"; }

std::optional<Device> Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  constexpr std::string_view kCuda = "cuda:";
  if (!text.starts_with(kCuda) || text.size() == kCuda.size()) return std::nullopt;
  int index = -1;
  const char* end = text.data() + text.size();
  auto [at, ec] = std::from_chars(text.data() + kCuda.size(), end, index);
  if (ec != std::errc() || at != end || index < 0) return std::nullopt;
  return cuda(index);
}

std::string Device::name() const { return isCpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace nanprov
