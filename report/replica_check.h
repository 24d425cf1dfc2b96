// Replicas compared: the ranks that replicate their parameters (DDP over one process group) each
// recorded a digest of every parameter after every optimizer step (base/records/replica_digest.h).
// Equal values give equal digests, so the first step at which a rank's digests differ from its
// replicas' is where its parameters went wrong without going non-finite: a flipped bit, a faulty
// device (issue 64). The comparison is made here, offline, over what the stores hold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"  // StepUnit

namespace nanprov::store {
struct RunData;  // store/reader.h
}  // namespace nanprov::store

namespace nanprov::report {

struct ReplicaDivergence {
  int64_t step = 0;
  // The ranks whose digests differ from the majority's. With two replicas, or no majority among
  // more, no rank can be told wrong: every rank that disagrees is named.
  std::vector<int> ranks;
  bool by_majority = false;  // ranks were told apart by a majority of the replicas
  std::string parameter;     // the first parameter, in the model's order, whose digests differ ("": none kept)
  // The step whose per-parameter digests named it: `step`, or the first later step that kept them
  // (store/replica_digest_rows.h).
  int64_t parameter_step = 0;
};

struct ReplicaCheck {
  bool checked = false;
  std::string why_not;     // when !checked: why nothing was compared
  std::vector<int> ranks;  // the ranks compared, at one step or more
  // The replica groups compared, each its ranks in order: one for DDP, one per shard for HSDP
  // (whose ranks 0 and 2 may hold one shard, 1 and 3 the other).
  std::vector<std::vector<int>> groups;
  int64_t steps = 0;     // steps at which two replicas or more were compared
  bool sharded = false;  // some parameters were sharded (FSDP, DTensor): never compared
  std::optional<ReplicaDivergence> first_divergence;
};

// Groups the ranks by the replica group each recorded (only ranks that name each other), and
// compares, step by step, the ranks of a group that recorded that step: a rank that died, or
// recorded fewer steps, is compared while it recorded. The earliest divergence of any group.
ReplicaCheck checkReplicas(const store::RunData& run);

// What was compared and what it showed, in one line for people ("ranks 0, 1, 2 compared after
// each of 8 steps: bit for bit equal"); "" for a run with no replicas and nothing sharded.
std::string replicaCheckText(const ReplicaCheck& r, StepUnit unit);
// "first in head.weight", with the step its digests were compared at when later than the divergence.
std::string parameterText(const ReplicaDivergence& d);
// "ranks 0 and 1", "ranks 0, 1, 2", "rank 1".
std::string ranksText(const std::vector<int>& ranks);

}  // namespace nanprov::report
