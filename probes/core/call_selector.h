// CallSelector: which calls a --inject or --capture spec applies to, by rank, layer, step, call
// ordinal and phase. A key left out matches every call. Shared by both specs, so they read alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/records/call_record.h"
#include "base/status.h"
#include "base/text.h"  // splitList, for the specs parsed with these

namespace nanprov::probes {

struct CallSelector {
  std::optional<int> rank;
  std::optional<int64_t> layer, step, call;
  std::optional<int64_t> from_step;  // from-step=N: step N and every one after it
  std::optional<Phase> phase;

  bool matches(int rank_, int64_t layer_, int64_t step_, int64_t call_, Phase phase_) const;
  template <typename Call>  // a CallRecord or a CallEvent
  bool matches(const Call& c) const {
    return matches(c.rank, c.layer, c.step, c.call, c.phase);
  }
};

// Reads one key=value of a selector (rank, layer, step, from-step, call, phase). Returns false when `key`
// is not a selector key; *ok is false when it is one but `value` does not parse.
bool readSelectorKey(CallSelector* selector, const std::string& key, const std::string& value, bool* ok);

// "k=v,k2=v2" as (key, value) pairs in order, empty parts dropped. Fails, saying why, on a part
// without '=' and on a key given twice (the second would silently win).
StatusOr<std::vector<std::pair<std::string, std::string>>> splitKeyValues(const std::string& text);

}  // namespace nanprov::probes
