#include "probes/call_selector.h"

#include <charconv>

namespace nanprov {
namespace {

template <typename T>
bool parseInt(const std::string& s, T* out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

bool CallSelector::matches(int rank_, int64_t layer_, int64_t step_, int64_t call_, Phase phase_) const {
  return (!rank || *rank == rank_) && (!layer || *layer == layer_) && (!step || *step == step_) &&
         (!call || *call == call_) && (!phase || *phase == phase_);
}

bool readSelectorKey(CallSelector* selector, const std::string& key, const std::string& value, bool* ok) {
  if (key == "phase") {
    Phase p;
    *ok = parsePhase(value, &p);
    if (*ok) selector->phase = p;
  } else if (key == "rank") {
    int v;
    *ok = parseInt(value, &v);
    if (*ok) selector->rank = v;
  } else if (key == "layer" || key == "step" || key == "call") {
    int64_t v;
    *ok = parseInt(value, &v);
    if (*ok) (key == "layer" ? selector->layer : key == "step" ? selector->step : selector->call) = v;
  } else {
    return false;
  }
  return true;
}

std::vector<std::string> splitList(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(sep, begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin) parts.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

}  // namespace nanprov
