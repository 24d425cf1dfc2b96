#include "store/audit_file.h"

#include <ostream>

#include "store/capture_file.h"
#include "store/file_replace.h"
#include "store/small_file.h"

namespace nanprov::store {

std::string auditFilePath(const std::string& capture_path) { return captureSidecarPath(capture_path, ".audit.json"); }

Status writeAuditFile(const std::string& capture_path, const nlohmann::json& doc) {
  return replaceFile(
      auditFilePath(capture_path), "audit result", [&](std::ostream& out) { out << doc.dump(1) << "\n"; }, ".tmp");
}

StatusOr<std::optional<nlohmann::json>> readAuditFile(const std::string& capture_path) {
  const std::string path = auditFilePath(capture_path);
  NANPROV_ASSIGN_OR_RETURN(std::optional<std::string> text, readSmallFile(path));
  if (!text) return std::optional<nlohmann::json>();
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || doc.value("format", "") != kAuditFormat) {
    return Status::Error(path + " is not an audit result; delete it and audit the capture again (nanprov replay " +
                         capture_path + " --audit)");
  }
  return std::optional<nlohmann::json>(std::move(doc));
}

}  // namespace nanprov::store
