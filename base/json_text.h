// JSON out of nanprov: text read back from stores and captures, or module paths from a user's
// model, may hold invalid UTF-8 (a damaged file, a path cut mid-character). nlohmann::json throws
// on it when dumping; every JSON nanprov writes goes through here and gets U+FFFD instead.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace nanprov {

inline std::string jsonText(const nlohmann::json& doc, int indent = -1) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A field of a document read from a file (audit findings, a kept replay): null when the document
// is not an object or lacks it, so a damaged file reads as missing fields and never throws.
inline const nlohmann::json& jsonField(const nlohmann::json& doc, const char* key) {
  static const nlohmann::json kNull;
  if (!doc.is_object()) return kNull;
  auto it = doc.find(key);
  return it == doc.end() ? kNull : *it;
}

// A JSON array printed to stdout as it is made, one element per line: a listing of millions of
// calls starts at once, holds one element at a time, and stays one line per call for grep.
class JsonArrayPrinter {
 public:
  JsonArrayPrinter() { std::fputs("[", stdout); }
  ~JsonArrayPrinter() { std::fputs(count_ ? "\n]\n" : "]\n", stdout); }
  JsonArrayPrinter(const JsonArrayPrinter&) = delete;
  JsonArrayPrinter& operator=(const JsonArrayPrinter&) = delete;

  void add(const nlohmann::json& element) {
    std::string text = (count_++ ? ",\n" : "\n") + jsonText(element);
    std::fwrite(text.data(), 1, text.size(), stdout);
  }

 private:
  size_t count_ = 0;
};

}  // namespace nanprov
