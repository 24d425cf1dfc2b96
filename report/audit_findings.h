// What the audit of a run found (`nanprov run --audit`, DESIGN.md "Audit"): each audit capture's
// judgement, read from CAPTURE.audit.json, the calls that were not audited and why, and what the
// audit cost. Findings are calls whose outputs were finite and still wrong (or worse) against the
// float64 reference. Read by `nanprov report`, and by `nanprov run` at its end.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "report/judgements.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

// What the audit judged, per (rank, layer, phase) it met (DESIGN.md, "Audit": every layer, through
// the whole run), from the audit's capture rows and their judgements.
struct AuditCoverage {
  struct Key {
    int rank = 0;
    int64_t layer = 0;
    std::string phase;
    int64_t judged = 0;                         // calls judged
    int64_t last_step = -1;                     // the latest judged, -1: never
    std::map<std::string, int64_t> not_judged;  // why → calls met but not judged
    std::set<int64_t> judged_steps;             // the steps of its judged calls
    // The conditions its calls ran in (probes/core/condition_regime.h), from the rank's meta, by
    // when each was first seen.
    struct Regime {
      std::string conditions;  // in words
      int64_t first_seen = 0, last_seen = 0, calls = 0;
      std::optional<int64_t> judged_at;  // the step of its latest judgement
      std::optional<int64_t> taken_at;   // taken to be judged at this step, with no judgement (yet)
      bool judged() const { return judged_at.has_value(); }
    };
    std::vector<Regime> regimes;
  };
  std::vector<Key> keys;  // by rank, layer, phase
  int64_t regimes_seen = 0, regimes_judged = 0;
  int64_t every_steps = 0;
  double budget_percent = 0;
  int64_t rotations = 0, held_back = 0;  // steps whose rotation ran, and steps the budget held it back
  int64_t regime_changes = 0;            // calls judged again because their conditions changed
};

// A call the audit found wrong: finite outputs (or worse) against the float64 reference, as its
// judgement (CAPTURE.audit.json) says.
struct AuditFinding {
  int rank = 0;
  std::optional<int64_t> layer, call;  // from its name; none where the name does not read as one
  std::string name;                    // rank<R>:layer<L>:call<C>, as the engine wrote it
  int64_t step = -1;                   // -1: not a step number
  std::string phase, op, backend;
  std::optional<std::string> kernel;   // its main kernel, where the engine named one
  std::optional<std::string> verdict;  // the worst of its tensors'
  std::vector<TensorJudgement> tensors;
  std::string conditions_text;
  std::optional<std::string> slice;  // audited on a slice of the call
  // A backward's O and LSE from its forward, judged; those already wrong (the fault is then in
  // the forward, upstream of this call).
  std::optional<std::string> received_wrong;
  std::vector<KnownIssueNote> known_issues;
  std::string capture;  // the audit capture's path, for nanprov replay
  // Passed on to --json as the engine wrote them (its tensors' every measure, what the backward
  // received, the conditions): fields a newer engine adds reach scripts without a report change.
  nlohmann::json tensors_as_written, received_as_written, conditions_as_written;
};

struct AuditSummary {
  bool on = false;                             // the run audited (run.json), or holds audit captures
  bool warn_only = false;                      // --audit-warn-only: findings do not fail the run
  int64_t audited = 0;                         // calls judged
  int64_t suspect = 0;                         // judged calls within only PyTorch's looser tolerances: not findings
  int64_t bytes = 0;                           // captured for the audit, over all ranks
  double seconds = 0;                          // judging, summed over calls
  std::map<std::string, int64_t> not_audited;  // why → calls
  int64_t unjudged = 0;                        // audit captures with no judgement (the run ended before, or is running)
  std::vector<AuditFinding> findings;          // ordered by step, rank, call
  AuditCoverage coverage;
};

AuditSummary readAudit(const store::RunData& run);

// {"on", "calls", "findings", "seconds", "bytes", "suspect", "not_audited": [{why, calls}], "unjudged",
//  "coverage": {layers, calls_judged, per_layer: [{rank, layer, phase, judged, last_step}],
//               never_judged: [{rank, layer, phase, why}], rotation: {...}}}.
nlohmann::json auditCostJson(const AuditSummary& audit);
// The report's audit_findings: [{rank, layer, call, name, step, phase, op, backend, kernel, verdict,
// tensors, conditions, conditions_text, slice, received, received_wrong, known_issues, capture}].
nlohmann::json auditFindingsJson(const AuditSummary& audit);
// The report's lines on the audit: each finding, and one line of totals. Empty when it was off.
// Texts from the files are printed as given: the caller escapes them (report/terminal_text.h).
std::string auditText(const AuditSummary& audit);

}  // namespace nanprov::report
