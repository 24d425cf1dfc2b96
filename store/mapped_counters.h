// MappedCounters: a few int64 counters kept in a small file of their own through a shared memory
// mapping. Every update is in the kernel's page cache the moment it is made, so the counts survive
// the process ending by any path, SIGKILL included, and another process that maps the same file
// sees them at once, without a system call on either side. Two uses:
//  - the call tally (rank-<r>.tally, kCallTallySlots): how many attention calls a rank's probes
//    began, so the report can say how many of the last calls never reached the store, and the
//    earliest step at which the process saw a non-finite value (a call not clean, or the
//    sentinel's gradients), so a NaN whose rows were lost to a kill or a full disk is still said;
//  - the audit's progress (rank-<r>.audit-progress, kAuditProgressSlots): how many of the rank's
//    audit captures `nanprov run`'s judge has judged, and how long judging them (and the
//    rotation's alone) took, which the probes read to pace the audit's rotation
//    (probes/core/capture_policy.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace nanprov::store {

// Slots of the call tally. kFirstNonFiniteStep holds that step + 1 (0: none seen); a tally of
// one slot is an older run's.
enum CallTallySlot : size_t { kCallsBegun = 0, kFirstNonFiniteStep = 1, kCallTallySlots = 2 };

// Slots of the audit-progress file: captures judged, the time judging them, and of it the time
// judging the rotation's captures (the one the rotation's budget counts).
enum AuditProgressSlot : size_t { kAuditsJudged = 0, kAuditJudgeNs = 1, kRotationJudgeNs = 2, kAuditProgressSlots = 3 };

class MappedCounters {
 public:
  // Creates `path` (slots × 8 bytes, zero, written: its bytes are on the disk before the mapping
  // writes them, so a disk that fills later cannot fault a write through it) or reopens it, and maps it.
  static StatusOr<std::unique_ptr<MappedCounters>> open(const std::string& path, size_t slots = 1);
  ~MappedCounters();
  MappedCounters(const MappedCounters&) = delete;
  MappedCounters& operator=(const MappedCounters&) = delete;

  void add(size_t slot, int64_t n = 1);  // one atomic add to the mapping: no system call
  void set(size_t slot, int64_t value);
  // Lowers `slot` to `value` unless it holds a smaller one other than 0 (0: unset).
  void keepSmallest(size_t slot, int64_t value);
  int64_t get(size_t slot) const;

 private:
  MappedCounters(int64_t* counts, size_t slots) : counts_(counts), slots_(slots) {}
  int64_t* counts_;
  size_t slots_;
};

// The counters in `path`, read with one pread; nullopt when there is no such file (older runs)
// or it is not `slots` non-negative counters.
std::optional<std::vector<int64_t>> readMappedCounters(const std::string& path, size_t slots = 1);

}  // namespace nanprov::store
