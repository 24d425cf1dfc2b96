// The report as JSON for scripts (`nanprov report --json`; docs/architecture.md lists its fields).
// Renders the model (report/report.h) and reads nothing else; texts are kept as stored (the
// encoder escapes them).
#pragma once

#include <nlohmann/json.hpp>

#include "base/records/call_health.h"
#include "base/records/call_record.h"
#include "report/report.h"

namespace nanprov::report {

nlohmann::json reportJson(const Report& report);

// One call with its health, as `report --json` names the edges and `calls --json` lists calls.
nlohmann::json callJson(const CallRecord& call, const CallHealth& health);

// Where a call ran, for whoever acts on the node: {host, device, gpu, gpu_uuid, pci_bus_id,
// driver, cuda_driver, cudnn}, null for what is not known (every GPU field on the CPU).
nlohmann::json deviceIdentityJson(const DeviceIdentity& id);

}  // namespace nanprov::report
