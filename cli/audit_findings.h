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

struct AuditSummary {
  bool on = false;         // the run audited (run.json), or holds audit captures
  bool warn_only = false;  // --audit-warn-only: findings do not fail the run
  int64_t audited = 0;     // calls judged
  int64_t bytes = 0;       // captured for the audit, over all ranks
  double seconds = 0;      // judging, summed over calls
  std::map<std::string, int64_t> not_audited;  // why → calls
  int64_t unjudged = 0;    // audit captures with no judgement (the run ended before, or is running)
  std::vector<nlohmann::json> findings;  // report's audit_findings, ordered by step, rank, call
};

AuditSummary readAudit(const RunData& run);

// {"on", "calls", "findings", "seconds", "bytes", "not_audited": [{why, calls}], "unjudged"}.
nlohmann::json auditCostJson(const AuditSummary& audit);
// The report's lines on the audit: each finding, and one line of totals. Empty when it was off.
std::string auditText(const AuditSummary& audit);

}  // namespace nanprov
