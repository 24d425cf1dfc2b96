// The report as JSON for scripts (`nanprov report --json`; docs/architecture.md lists its fields).
// Renders the model (report/report.h) and reads nothing else; texts are kept as stored (the
// encoder escapes them).
#pragma once

#include <nlohmann/json.hpp>

#include "base/records/call_health.h"
#include "base/records/call_record.h"
#include "report/report.h"

namespace nanprov {

nlohmann::json reportJson(const Report& report);

// One call with its health, as `report --json` names the edges and `calls --json` lists calls.
nlohmann::json callJson(const CallRecord& call, const CallHealth& health);

}  // namespace nanprov
