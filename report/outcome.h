// What a run's report concludes: clean, a non-finite edge, non-finite gradients that started
// outside attention (the gradient sentinel), replicas whose parameters diverged, or nothing checked
// at all. "Clean" means attention
// was checked and every value was finite, never that nanprov saw nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "report/audit_findings.h"
#include "report/collective_paths.h"
#include "report/edges.h"
#include "report/first_module.h"
#include "report/replica_check.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

// The earliest step, across ranks, whose gradients (or parameters after the update) held NaN/Inf.
// At one step, a rank that received them through a collective comes after a rank that did not:
// the rank that sent them is where they were made.
struct SentinelFinding {
  int rank = 0;
  int64_t step = 0;
  std::vector<std::string> gradients;  // parameters whose gradient was non-finite
  std::vector<std::string> values;     // parameters whose value was non-finite after the update
};
std::optional<SentinelFinding> earliestSentinel(const store::RunData& run,
                                                const std::set<std::pair<int, int64_t>>& received);

// kPartial: no fault among what was checked, but not everything was (attention recognised and not
// checked, or ranks of the job not read). Nothing went non-finite that nanprov saw.
// kUnattributed: values went non-finite, and what made them was not checked: attention ran
// unchecked by then (or ranks were not read), and nothing nanprov checked is known to have made them.
// kAuditFinding: every value was finite, but the audit found a call whose outputs were wrong.
// kReplicaDivergence: every value was finite, but ranks that replicate their parameters (DDP) held
// different ones after a step (report/replica_check.h): finite corruption, a suspected device.
enum class Outcome {
  kClean,
  kPartial,
  kUnattributed,
  kEdgeFound,
  kOutsideAttention,
  kNothingChecked,
  kAuditFinding,
  kReplicaDivergence
};
// "clean" | "partial" | "unattributed" | "edge" | "outside_attention" | "nothing_checked" | "audit_finding"
// | "replica_divergence"
const char* outcomeName(Outcome o);
// Whether it says a fault was found (values went non-finite, or the audit found wrong ones).
bool outcomeIsFault(Outcome o);

struct Conclusion {
  Outcome outcome = Outcome::kClean;
  std::optional<SentinelFinding> sentinel;
  bool sentinel_first = false;  // the sentinel's step came before any attention edge's: it is the answer
  // The ranks whose values went non-finite through a collective, and from which ranks.
  std::vector<CollectivePath> collective_paths;
  std::map<std::string, int64_t> unprobed;  // attention recognised but not checked
  // With a sentinel finding whose step saw attention run unchecked: those kinds, and the ranks of
  // the job not read. The origin may then be that attention, so the outcome is unattributed,
  // never outside_attention.
  std::vector<std::string> unchecked_by_sentinel_step;
  // With a first edge whose values came from upstream: the attention that ran unchecked by its
  // step, which may have made them (the outcome is then unattributed, unless --trail named a
  // module outside attention that made them).
  std::vector<std::string> unchecked_by_edge_step;
  // --trail named, as the module that made the first non-finite values from finite inputs, a
  // module of attention the run counted unchecked: the values were made inside that attention.
  bool made_in_unchecked_attention = false;
  std::string nothing_checked_why;  // set for kNothingChecked
  // Unattributed for want of rows: a rank's process saw a non-finite value at this step (its call
  // tally says), but no call or finding that shows it reached the store (killed, or the disk filled).
  struct Unstored {
    int rank = 0;
    int64_t step = 0;
  };
  std::optional<Unstored> nonfinite_not_stored;
  AuditSummary audit;     // with any outcome
  ReplicaCheck replicas;  // with any outcome; decides it only where nothing else was found
};

// What the report says when no attention call was checked: the one option that checks attention
// nanprov did not recognise.
extern const char* const kUnseenAttentionHint;

// The sentinel wins when its step comes before the first attention edge's: the gradients went
// bad first, and attention only received them. It blames code outside attention only when
// attention was checked and none ran unchecked up to its step; otherwise the outcome is unattributed (exit 1): nanprov
// cannot tell whether that attention made the values, unless --trail named that attention's
// module (`first_module`, report/first_module.h) as where they were made.
Conclusion conclude(const store::RunData& run, const Findings& findings,
                    const std::optional<FirstModule>& first_module);

}  // namespace nanprov::report
