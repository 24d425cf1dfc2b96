// A store's meta table (key → text) read by key, one way everywhere: the text, or an integer
// parsed strictly (base/numbers.h), so a damaged value reads as absent, never as a bent number.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/numbers.h"

namespace nanprov::store {

using StoreMeta = std::map<std::string, std::string>;

// nullptr when the store has no such key.
inline const std::string* metaText(const StoreMeta& meta, const std::string& key) {
  auto it = meta.find(key);
  return it == meta.end() ? nullptr : &it->second;
}

// nullopt when the key is absent, or its value is not a whole number in [min, max].
inline std::optional<int64_t> metaInteger(const StoreMeta& meta, const std::string& key, int64_t min, int64_t max) {
  const std::string* text = metaText(meta, key);
  return text ? parseInteger(*text, min, max) : std::nullopt;
}

}  // namespace nanprov::store
