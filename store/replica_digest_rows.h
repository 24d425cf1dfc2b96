// How a rank's replica digests are kept, bounded over any run's length (issue 64): every step's
// digest of the whole model (parameter ""), which finds the first step at which replicas differ,
// and each parameter's digests only at landmark steps (the first 16, then powers of two) and the
// newest few, which name the parameter that differs. A parameter that went wrong stays wrong
// (DDP applies the same averaged gradient on every replica and never copies parameters again),
// so the next kept step names it. The writer alone calls these.
#pragma once

#include <cstdint>
#include <vector>

#include "base/records/replica_digest.h"
#include "base/status.h"

struct sqlite3;

namespace nanprov::store {

// Steps whose per-parameter digests are kept after newer ones arrive: the first 16, then powers
// of two. The newest kNewestParameterSteps steps' are kept too.
inline constexpr int64_t kNewestParameterSteps = 4;
bool isLandmarkStep(int64_t step);

// `digests` (one batch, any steps, each step's parameters in the model's order) with each step's
// whole-model digest added as the row of parameter "": each parameter's digest weighted by its
// place, so a changed parameter changes it, whichever it is.
std::vector<ReplicaDigestRecord> withModelDigests(const std::vector<ReplicaDigestRecord>& digests);

// Deletes the per-parameter digests of steps that are neither landmarks nor among the newest
// kNewestParameterSteps up to `newest`.
Status pruneParameterDigests(sqlite3* db, int64_t newest);

}  // namespace nanprov::store
