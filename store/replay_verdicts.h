// A replay's verdicts kept next to its capture (CAPTURE.replay.json), for `report --html`: what
// `nanprov replay CAPTURE --json` printed, saved there by whoever ran it (the page says how). The
// run never writes one itself: a replay runs every backend, far more than a run should spend.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"

namespace nanprov::store {

// CAPTURE with ".safetensors" replaced by ".replay.json".
std::string replayVerdictsPath(const std::string& capture_path);

// nullopt when none is kept; an error when the file is there but is not a replay's JSON.
StatusOr<std::optional<nlohmann::json>> readReplayVerdicts(const std::string& capture_path);

}  // namespace nanprov::store
