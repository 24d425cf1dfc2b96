// The captured tensors' memory layouts in a replay's output: JSON for scripts, and text lines that
// name only what replay could not rebuild as the run had it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "replay/replay_result.h"

namespace nanprov::replay {

// {"Q": {"recorded": {"strides": [...], "storage_offset": 64, "alignment": 256}, "replayed": {...},
//  "faithful": true, "note": null}, ...}; unrecorded parts are null.
nlohmann::json layoutsJson(const std::vector<LayoutReport>& layouts);

// "layout: Q, K, V rebuilt as in the run (strides, storage offset, alignment)\n", then a
// "layout: ROLE: why" line for each tensor that was not; empty without tensors.
std::string layoutsText(const std::vector<LayoutReport>& layouts);

}  // namespace nanprov::replay
