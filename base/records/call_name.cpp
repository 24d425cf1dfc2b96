#include "base/records/call_name.h"

#include <string_view>

#include "base/numbers.h"

namespace nanprov {

std::string callName(int rank, int64_t layer, int64_t call) {
  return "rank" + std::to_string(rank) + ":layer" + std::to_string(layer) + ":call" + std::to_string(call);
}

std::string callName(const CallRecord& call) { return callName(call.rank, call.layer, call.call); }

std::optional<ParsedCallName> parseCallName(const std::string& name) {
  // Three fields, each a prefix and a number: "rank", ":layer", ":call".
  ParsedCallName out;
  std::string_view rest = name;
  auto field = [&rest](std::string_view prefix, int64_t max) -> std::optional<int64_t> {
    if (rest.substr(0, prefix.size()) != prefix) return std::nullopt;
    rest.remove_prefix(prefix.size());
    size_t end = rest.find(':');
    auto value = parseInteger(rest.substr(0, end), 0, max);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
    return value;
  };
  auto rank = field("rank", kMaxRank);
  auto layer = field(":layer", INT64_MAX);
  auto call = field(":call", INT64_MAX);
  if (!rank || !layer || !call || !rest.empty()) return std::nullopt;
  out.rank = static_cast<int>(*rank);
  out.layer = *layer;
  out.call = *call;
  return out;
}

}  // namespace nanprov
