// What a tensor is to an attention call: Q, K, V, the mask, O, LSE, or a gradient; and, for
// attention written in plain ops (softmax(q kᵀ) v), the scores S (with the bias or mask they carry)
// and the probabilities P it computed on the way. The training thread carries the enum; the name
// is what the store, the JSON and the report say.
#pragma once

#include <optional>
#include <string_view>

namespace nanprov {

enum class Role { kQ, kK, kV, kMask, kO, kLSE, kdO, kdQ, kdK, kdV, kS, kP };
inline constexpr int kRoleCount = 12;

const char* roleName(Role r);  // "Q" "K" "V" "mask" "O" "LSE" "dO" "dQ" "dK" "dV" "S" "P"
std::optional<Role> parseRole(std::string_view name);

}  // namespace nanprov
