#include "base/records/roles.h"

#include <gtest/gtest.h>

namespace nanprov::probes {
namespace {

TEST(RoleMap, SchemaArgumentNamesMapToRoles) {
  EXPECT_EQ(roleOfArgument("query"), Role::kQ);
  EXPECT_EQ(roleOfArgument("attn_mask"), Role::kMask);
  EXPECT_EQ(roleOfArgument("attn_bias"), Role::kMask);
  EXPECT_EQ(roleOfArgument("grad_out_"), Role::kdO);
  EXPECT_EQ(roleOfArgument("logsumexp"), Role::kLSE);
  EXPECT_EQ(roleOfArgument("out"), Role::kO);
  EXPECT_FALSE(roleOfArgument("dropout_p").has_value());
  EXPECT_FALSE(roleOfArgument("philox_seed").has_value());
}

TEST(RoleMap, EveryOpHasOutputRolesOfItsPhase) {
  for (const AttentionOp& op : attentionOps()) {
    ASSERT_FALSE(op.outputs.empty()) << op.name;
    for (Role r : op.outputs) EXPECT_TRUE(isOutputRole(op.phase, r)) << op.name << " " << roleName(r);
    EXPECT_EQ(findAttentionOp(op.name), &op);
  }
  EXPECT_EQ(findAttentionOp("aten::mm"), nullptr);
}

TEST(RoleMap, CpuFlashBackwardRows) {
  const AttentionOp* op = findAttentionOp("aten::_scaled_dot_product_flash_attention_for_cpu_backward");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->phase, Phase::kBackward);
  EXPECT_EQ(op->outputs, (std::vector<Role>{Role::kdQ, Role::kdK, Role::kdV}));
}

TEST(RoleMap, NamesRoundTrip) {
  for (int i = 0; i < kRoleCount; ++i) {
    Role r = static_cast<Role>(i);
    EXPECT_EQ(parseRole(roleName(r)), r);
  }
  EXPECT_FALSE(parseRole("dX").has_value());
}

}  // namespace
}  // namespace nanprov::probes
