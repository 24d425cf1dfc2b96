#include "probes/core/call_selector.h"

#include <algorithm>
#include <limits>
#include <set>

#include "base/numbers.h"

namespace nanprov::probes {

bool CallSelector::matches(int rank_, int64_t layer_, int64_t step_, int64_t call_, Phase phase_) const {
  return (!rank || *rank == rank_) && (!layer || *layer == layer_) && (!step || *step == step_) &&
         (!from_step || step_ >= *from_step) && (!call || *call == call_) && (!phase || *phase == phase_);
}

bool readSelectorKey(CallSelector* selector, const std::string& key, const std::string& value, bool* ok) {
  if (key == "phase") {
    Phase p;
    *ok = parsePhase(value, &p);
    if (*ok) selector->phase = p;
  } else if (key == "rank") {
    auto v = parseInteger(value, 0, std::numeric_limits<int>::max());  // ranks, like the rest, count from 0
    *ok = v.has_value();
    if (*ok) selector->rank = static_cast<int>(*v);
  } else if (key == "layer" || key == "step" || key == "call" || key == "from-step") {
    auto v = parseInteger(value, 0, std::numeric_limits<int64_t>::max());
    *ok = v.has_value();
    if (*ok) {
      (key == "layer"  ? selector->layer
       : key == "step" ? selector->step
       : key == "call" ? selector->call
                       : selector->from_step) = *v;
    }
  } else {
    return false;
  }
  return true;
}

StatusOr<std::vector<std::pair<std::string, std::string>>> splitKeyValues(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::set<std::string> seen;
  // Every item between commas is a key=value: "tensor=O,,layer=1" or a trailing comma is a typo
  // that would otherwise drop a key without a word.
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = std::min(text.find(',', begin), text.size());
    std::string part = text.substr(begin, end - begin);
    begin = end + 1;
    if (part.empty()) return Status::Error("an empty item in '" + text + "' (two commas, or one at an end)");
    auto eq = part.find('=');
    if (eq == std::string::npos) return Status::Error("'" + part + "' is not key=value");
    std::string key = part.substr(0, eq);
    if (!seen.insert(key).second) return Status::Error(key + "= is given twice");
    pairs.emplace_back(key, part.substr(eq + 1));
  }
  return pairs;
}

}  // namespace nanprov::probes
