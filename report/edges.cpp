#include "report/edges.h"

#include <set>

#include "base/numbers.h"
#include "store/reader.h"
#include "store/run_dir.h"

namespace nanprov::report {

const char* originName(Origin o) {
  switch (o) {
    case Origin::kAttention: return "attention";
    case Origin::kUpstream: return "upstream";
    case Origin::kNone: break;
  }
  return "";
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
      f.origin = h.kind == EdgeKind::kSourceEdge ? Origin::kAttention : Origin::kUpstream;
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

Findings analyze(const store::RunData& run) {
  Findings f = analyze(run.calls);
  if (run.scope == store::RunScope::kEdges) {
    f.propagation.calls = run.not_clean.calls;
    f.propagation.layers = static_cast<int64_t>(run.not_clean.layers.size());
    f.propagation.ranks = static_cast<int64_t>(run.not_clean.ranks.size());
  }
  return f;
}

}  // namespace nanprov::report
