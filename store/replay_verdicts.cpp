#include "store/replay_verdicts.h"

#include "store/capture_file.h"
#include "store/small_file.h"

namespace nanprov::store {

std::string replayVerdictsPath(const std::string& capture_path) {
  return captureSidecarPath(capture_path, ".replay.json");
}

StatusOr<std::optional<nlohmann::json>> readReplayVerdicts(const std::string& capture_path) {
  const std::string path = replayVerdictsPath(capture_path);
  NANPROV_ASSIGN_OR_RETURN(std::optional<std::string> text, readSmallFile(path));
  if (!text) return std::optional<nlohmann::json>();
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  // The fields the page reads; a replay's JSON has them all (replay/replay_render.cpp, toJson).
  if (!doc.is_object() || !doc.contains("backends") || !doc["backends"].is_array() || !doc.contains("root_cause") ||
      !doc["root_cause"].is_object()) {
    return Status::Error(path + " is not the JSON of nanprov replay; write it again (nanprov replay " + capture_path +
                         " --json > " + path + ")");
  }
  return std::optional<nlohmann::json>(std::move(doc));
}

}  // namespace nanprov::store
