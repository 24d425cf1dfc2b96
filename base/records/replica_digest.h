// One parameter's digest after one optimizer step, on one rank: a sum of the parameter's raw bit
// patterns as integers, so ranks that replicate the parameter (DDP) hold equal digests, and one
// flipped bit in one element changes it. The report compares them across ranks offline
// (report/replica_check.h): finite silent corruption that no NaN check can see.
#pragma once

#include <cstdint>
#include <string>

namespace nanprov {

struct ReplicaDigestRecord {
  int rank = 0;           // the recording process's rank (the store's)
  int64_t step = 0;       // the step whose optimizer update made the values, as the sentinel's
  std::string parameter;  // the model's full parameter name, as the sentinel names it
  int64_t digest = 0;
};

// Meta keys of a rank that recorded digests: the global ranks that replicate its parameters (its
// DDP process group's, "0,1,2"), and "1" where some of its parameters are sharded (FSDP, DTensor):
// those are never digested, nor compared.
inline constexpr const char* kReplicaGroupMeta = "replica_group";
inline constexpr const char* kReplicaShardedMeta = "replica_sharded";

}  // namespace nanprov
