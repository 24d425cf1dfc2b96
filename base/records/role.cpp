#include "base/records/role.h"

#include <array>

namespace nanprov {
namespace {

constexpr std::array<const char*, kRoleCount> kRoleNames = {"Q",  "K",  "V",  "mask", "O", "LSE",
                                                            "dO", "dQ", "dK", "dV",   "S", "P"};

}  // namespace

const char* roleName(Role r) { return kRoleNames[static_cast<size_t>(r)]; }

std::optional<Role> parseRole(std::string_view name) {
  for (int i = 0; i < kRoleCount; ++i) {
    if (name == kRoleNames[static_cast<size_t>(i)]) return static_cast<Role>(i);
  }
  return std::nullopt;
}

}  // namespace nanprov
