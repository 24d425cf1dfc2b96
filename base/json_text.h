// JSON out of nanprov: text read back from stores and captures, or module paths from a user's
// model, may hold invalid UTF-8 (a damaged file, a path cut mid-character). nlohmann::json throws
// on it when dumping; every JSON nanprov writes goes through here and gets U+FFFD instead.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace nanprov {

inline std::string jsonText(const nlohmann::json& doc, int indent = -1) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace nanprov
