// Reads a run: every rank store of a run directory, merged. Read-only; a missing, empty or
// corrupt store is a Status with one clear line, never a crash.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/call_record.h"
#include "store/status.h"

namespace nanprov {

struct RankInfo {
  int rank = 0;
  std::string path;
  std::map<std::string, std::string> meta;
  int64_t steps = 0;  // step boundaries recorded
};

struct RunData {
  std::string dir;
  std::vector<RankInfo> ranks;
  std::vector<CallRecord> calls;  // all ranks, ordered by (step, start_ns, rank, seq)
  std::vector<KernelRecord> kernels;  // ordered by rank, then seq, then start
  std::vector<CaptureRecord> captures;  // per rank in the order decided
  std::vector<SentinelRecord> sentinel;  // per rank: the first step whose gradients went non-finite

  // Attention recognised but not checked, summed over ranks: what → count (meta "unprobed:*").
  std::map<std::string, int64_t> unprobed() const;
  // "forward_pass" when steps count inference forward passes, else "optimizer_step".
  std::string stepUnit() const;

  // The capture of one call: the written one when there is one, else why it was skipped.
  const CaptureRecord* captureOf(int rank, int64_t seq) const;

  // The kernels of one call, in launch order.
  std::vector<const KernelRecord*> kernelsOf(int rank, int64_t seq) const;
};

// A run directory whose processes recorded nothing (no rank store: no attention ran, or the
// training died first) loads as a run with no ranks; a directory that is not a run is an error.
StatusOr<RunData> loadRun(const std::string& dir);

// Result of a read-only query over all ranks (`nanprov sql`).
struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // nullopt is SQL NULL
  std::vector<bool> numeric;                                    // per column, from the first row
};

// Runs `sql` over the run's stores, which appear as the tables calls, tensors, kernels, captures, steps and meta
// (the union of all ranks; meta gains a rank column). Statements that write are refused.
StatusOr<QueryResult> queryRun(const std::string& dir, const std::string& sql);

}  // namespace nanprov
