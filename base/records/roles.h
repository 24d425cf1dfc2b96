// RoleMap: which argument or result of an attention op is Q, K, V, mask, O, LSE, dO, dQ, dK or dV.
// Inputs are mapped by the op schema's argument names, outputs by position. Both live in tables
// (roles.cpp): covering a new op is one row.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/records/call_record.h"
#include "base/records/role.h"

namespace nanprov {

// True when `role` is produced by a call of `phase` (O/LSE, and the scores S and probabilities P of
// attention written in plain ops, forward; dQ/dK/dV backward).
bool isOutputRole(Phase phase, Role role);

// The mask, and the scores S that carry it: -inf there hides a key, which is legal, and a row of
// nothing but hidden keys is a fully masked query row (counted as TensorHealth::masked_rows).
bool holdsMaskedRows(Role role);

// The role of an input argument, by its schema name; nullopt for scalars and bookkeeping tensors.
std::optional<Role> roleOfArgument(std::string_view schema_arg_name);

struct AttentionOp {
  const char* name;     // "aten::_scaled_dot_product_flash_attention_for_cpu"
  const char* backend;  // "flash_cpu", "cudnn", "flash", "efficient", "math"
  Phase phase;
  std::vector<Role> outputs;  // roles of the leading results, in order
};

// Every op nanprov probes, across torch versions; ops missing from a build are skipped.
const std::vector<AttentionOp>& attentionOps();
const AttentionOp* findAttentionOp(std::string_view name);

}  // namespace nanprov
