// An audit's judgement of one captured call (`nanprov run --audit`), kept next to the capture as
// CAPTURE.audit.json: written by the replay engine's audit mode (or by `nanprov run` when the
// engine could not judge the call), read by `nanprov report`. The document is the engine's JSON
// (replay/replay_render.cpp, auditJson): verdict per tensor, error figures, conditions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"

namespace nanprov::store {

inline constexpr const char* kAuditFormat = "nanprov-audit 1";

std::string auditFilePath(const std::string& capture_path);

// Written aside and renamed into place: a report run meanwhile sees none or the whole file.
Status writeAuditFile(const std::string& capture_path, const nlohmann::json& doc);

// nullopt when the capture was not judged (yet); an error when the file is unreadable.
StatusOr<std::optional<nlohmann::json>> readAuditFile(const std::string& capture_path);

}  // namespace nanprov::store
