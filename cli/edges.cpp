#include "cli/edges.h"

#include <set>

#include "base/numbers.h"
#include "store/run_dir.h"

namespace nanprov {

std::string callName(const CallRecord& call) {
  return "rank" + std::to_string(call.rank) + ":layer" + std::to_string(call.layer) + ":call" +
         std::to_string(call.call);
}

std::optional<CallName> parseCallName(const std::string& name) {
  // Three fields, each a prefix and a number: "rank", ":layer", ":call".
  CallName out;
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

Findings analyze(const std::vector<CallRecord>& calls) {
  Findings f;
  std::set<int64_t> layers;
  std::set<int> ranks;
  for (size_t i = 0; i < calls.size(); ++i) {
    CallHealth h = classify(calls[i]);
    if (h.kind == EdgeKind::kClean) continue;
    if (!f.first) {
      f.first = i;
      f.first_health = h;
      f.origin = h.kind == EdgeKind::kSourceEdge ? "attention" : "upstream";
    }
    if (!f.first_source && h.kind == EdgeKind::kSourceEdge) f.first_source = i;
    ++f.propagation.calls;
    layers.insert(calls[i].layer);
    ranks.insert(calls[i].rank);
  }
  f.propagation.layers = static_cast<int64_t>(layers.size());
  f.propagation.ranks = static_cast<int64_t>(ranks.size());
  return f;
}

Findings analyze(const RunData& run) {
  Findings f = analyze(run.calls);
  if (run.scope == RunScope::kEdges) {
    f.propagation.calls = run.not_clean.calls;
    f.propagation.layers = static_cast<int64_t>(run.not_clean.layers.size());
    f.propagation.ranks = static_cast<int64_t>(run.not_clean.ranks.size());
  }
  return f;
}

}  // namespace nanprov
