// What a tensor is to an attention call: Q, K, V, the mask, O, LSE, or a gradient. The training
// thread carries the enum; the name is what the store, the JSON and the report say.
#pragma once

#include <optional>
#include <string_view>

namespace nanprov {

enum class Role { kQ, kK, kV, kMask, kO, kLSE, kdO, kdQ, kdK, kdV };
inline constexpr int kRoleCount = 10;

const char* roleName(Role r);  // "Q" "K" "V" "mask" "O" "LSE" "dO" "dQ" "dK" "dV"
std::optional<Role> parseRole(std::string_view name);

}  // namespace nanprov
