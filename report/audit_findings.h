// What the audit of a run found (`nanprov run --audit`, DESIGN.md "Audit"): each audit capture's
// judgement, read from CAPTURE.audit.json, the calls that were not audited and why, and what the
// audit cost. Findings are calls whose outputs were finite and still wrong (or worse) against the
// float64 reference. Read by `nanprov report`, and by `nanprov run` at its end.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "store/reader.h"

namespace nanprov {

// What the audit judged, per (rank, layer, phase) it met (DESIGN.md, "Audit": every layer, through
// the whole run), from the audit's capture rows and their judgements.
struct AuditCoverage {
  struct Key {
    int rank = 0;
    int64_t layer = 0;
    std::string phase;
    int64_t judged = 0;                           // calls judged
    int64_t last_step = -1;                       // the latest judged, -1: never
    std::map<std::string, int64_t> not_judged;   // why → calls met but not judged
  };
  std::vector<Key> keys;  // by rank, layer, phase
  int64_t every_steps = 0;
  double budget_percent = 0;
  int64_t rotations = 0, held_back = 0;  // steps whose rotation ran, and steps the budget held it back
};

struct AuditSummary {
  bool on = false;         // the run audited (run.json), or holds audit captures
  bool warn_only = false;  // --audit-warn-only: findings do not fail the run
  int64_t audited = 0;     // calls judged
  int64_t suspect = 0;     // judged calls within only PyTorch's looser tolerances: not findings
  int64_t bytes = 0;       // captured for the audit, over all ranks
  double seconds = 0;      // judging, summed over calls
  std::map<std::string, int64_t> not_audited;  // why → calls
  int64_t unjudged = 0;    // audit captures with no judgement (the run ended before, or is running)
  std::vector<nlohmann::json> findings;  // report's audit_findings, ordered by step, rank, call
  AuditCoverage coverage;
};

AuditSummary readAudit(const RunData& run);

// {"on", "calls", "findings", "seconds", "bytes", "suspect", "not_audited": [{why, calls}], "unjudged",
//  "coverage": {layers, calls_judged, per_layer: [{rank, layer, phase, judged, last_step}],
//               never_judged: [{rank, layer, phase, why}], rotation: {...}}}.
nlohmann::json auditCostJson(const AuditSummary& audit);
// The report's lines on the audit: each finding, and one line of totals. Empty when it was off.
std::string auditText(const AuditSummary& audit);

}  // namespace nanprov
