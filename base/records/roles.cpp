#include "base/records/roles.h"

#include <array>
#include <utility>

namespace nanprov {
namespace {

// Schema argument names across the SDPA family (see native_functions.yaml).
// `mask` is the name in PyTorch's fast-path op, aten::_native_multi_head_attention.
constexpr std::array<std::pair<std::string_view, Role>, 12> kArgumentRoles = {{
    {"query", Role::kQ},
    {"key", Role::kK},
    {"value", Role::kV},
    {"attn_mask", Role::kMask},
    {"mask", Role::kMask},
    {"attn_bias", Role::kMask},
    {"bias", Role::kMask},
    {"grad_out", Role::kdO},
    {"grad_out_", Role::kdO},
    {"out", Role::kO},
    {"logsumexp", Role::kLSE},
    {"log_sumexp", Role::kLSE},
}};

using R = Role;
constexpr Phase F = Phase::kForward;
constexpr Phase B = Phase::kBackward;

}  // namespace

bool isOutputRole(Phase phase, Role role) {
  if (phase == Phase::kForward) return role == Role::kO || role == Role::kLSE || role == Role::kS || role == Role::kP;
  return role == Role::kdQ || role == Role::kdK || role == Role::kdV;
}

bool holdsMaskedRows(Role role) { return role == Role::kMask || role == Role::kS; }

std::optional<Role> roleOfArgument(std::string_view schema_arg_name) {
  for (const auto& [name, role] : kArgumentRoles) {
    if (name == schema_arg_name) return role;
  }
  return std::nullopt;
}

const std::vector<AttentionOp>& attentionOps() {
  // The SDPA-level ops come first: when one calls a lower op (flash → _flash_attention_forward),
  // the outer call is the one recorded.
  static const std::vector<AttentionOp> kOps = {
      {"aten::_scaled_dot_product_flash_attention_for_cpu", "flash_cpu", F, {R::kO, R::kLSE}},
      {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", "flash_cpu", B, {R::kdQ, R::kdK, R::kdV}},
      {"aten::_scaled_dot_product_cudnn_attention", "cudnn", F, {R::kO, R::kLSE}},
      {"aten::_scaled_dot_product_cudnn_attention_backward", "cudnn", B, {R::kdQ, R::kdK, R::kdV}},
      {"aten::_scaled_dot_product_flash_attention", "flash", F, {R::kO, R::kLSE}},
      {"aten::_scaled_dot_product_flash_attention_backward", "flash", B, {R::kdQ, R::kdK, R::kdV}},
      {"aten::_scaled_dot_product_efficient_attention", "efficient", F, {R::kO, R::kLSE}},
      {"aten::_scaled_dot_product_efficient_attention_backward", "efficient", B, {R::kdQ, R::kdK, R::kdV}},
      {"aten::_flash_attention_forward", "flash", F, {R::kO, R::kLSE}},
      {"aten::_flash_attention_backward", "flash", B, {R::kdQ, R::kdK, R::kdV}},
      {"aten::_efficient_attention_forward", "efficient", F, {R::kO, R::kLSE}},
      {"aten::_efficient_attention_backward", "efficient", B, {R::kdQ, R::kdK, R::kdV}},
  };
  return kOps;
}

const AttentionOp* findAttentionOp(std::string_view name) {
  for (const AttentionOp& op : attentionOps()) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

}  // namespace nanprov
