#include "report/collective_paths.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "base/text.h"
#include "report/run_overview.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

using CollectiveKey = std::tuple<std::string, int64_t, int64_t>;  // (group, step, ordinal)

CollectiveKey keyOf(const CollectiveRecord& c) { return {c.group, c.step, c.ord}; }

// The parameters whose gradients the gradient sentinel found non-finite on `rank` at `step`.
std::vector<std::string> sentinelGradients(const store::RunData& run, int rank, int64_t step) {
  std::vector<std::string> names;
  for (const SentinelRecord& f : run.sentinel) {
    if (f.rank == rank && f.step == step && f.tensor == SentinelTensor::kGrad) names.push_back(f.parameter);
  }
  return names;
}

}  // namespace

std::vector<CollectivePath> collectivePaths(const store::RunData& run) {
  // Each rank's first collective that carried a non-finite value (rows are in issue order per rank).
  std::map<int, const CollectiveRecord*> first;
  std::map<CollectiveKey, std::set<int>> sent;  // the ranks whose input to it was non-finite
  for (const CollectiveRecord& c : run.collectives) {
    auto& f = first[c.rank];
    if (!f || std::make_pair(c.step, c.time_ns) < std::make_pair(f->step, f->time_ns)) f = &c;
    if (c.input.nonfinite() > 0) sent[keyOf(c)].insert(c.rank);
  }
  const bool every_rank_read = run.missingRanks().empty();
  std::vector<CollectivePath> paths;
  for (const auto& [rank, c] : first) {
    // Its input was bad here already, or its output was not read: nothing arrived through it.
    if (c->input.nonfinite() > 0 || !c->input.checked || c->output.nonfinite() == 0) continue;
    CollectivePath p{.rank = rank, .step = c->step, .op = c->op, .group = c->group, .ord = c->ord};
    if (auto it = sent.find(keyOf(*c)); it != sent.end()) p.from.assign(it->second.begin(), it->second.end());
    p.made_by_collective = p.from.empty() && every_rank_read;
    p.parameters = sentinelGradients(run, p.rank, p.step);
    paths.push_back(std::move(p));
  }
  return paths;
}

std::set<std::pair<int, int64_t>> receivedThroughCollective(const std::vector<CollectivePath>& paths) {
  std::set<std::pair<int, int64_t>> received;
  for (const CollectivePath& p : paths) received.emplace(p.rank, p.step);
  return received;
}

std::string collectivePathText(const CollectivePath& path, StepUnit unit, const std::string& carrying) {
  std::vector<std::string> from;
  for (int r : path.from) from.push_back(std::to_string(r));
  std::string where =
      !from.empty()             ? "non-finite on rank" + std::string(from.size() == 1 ? " " : "s ") + joined(from, ", ")
      : path.made_by_collective ? "finite on every rank: the collective itself made them (a reduction that overflowed)"
                                : "finite on every rank read; the ranks not read may have sent them";
  return "rank " + std::to_string(path.rank) + (carrying.empty() ? ": values" : ": gradients") +
         " went non-finite at " + stepLabel(unit, path.step) + " in " + path.op +
         (carrying.empty() ? "" : " (carrying " + carrying + ")") + ": its input was finite here and " + where;
}

nlohmann::json collectivePathJson(const CollectivePath& path) {
  return {{"rank", path.rank},
          {"step", path.step},
          {"op", path.op},
          {"group", path.group},
          {"ordinal", path.ord},
          {"from_ranks", path.from},
          {"made_by_collective", path.made_by_collective},
          {"parameters", path.parameters}};
}

}  // namespace nanprov::report
