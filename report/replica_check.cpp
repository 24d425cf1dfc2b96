#include "report/replica_check.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "base/text.h"
#include "report/run_overview.h"
#include "store/meta_values.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

// One rank's digests of one step: (parameter, digest) in the order written (the model's).
using StepDigests = std::vector<std::pair<std::string, int64_t>>;

// The ranks a group's meta lists ("0,1,2"), each parsed strictly; none when one is not a rank.
std::vector<int> ranksOfGroup(const std::string& text) {
  std::vector<int> ranks;
  size_t from = 0;
  while (from < text.size()) {
    size_t end = std::min(text.find(',', from), text.size());
    std::optional<int64_t> rank = parseInteger(std::string_view(text).substr(from, end - from), 0, INT32_MAX);
    if (!rank) return {};  // not a list this reader wrote: compare nothing rather than guess
    ranks.push_back(static_cast<int>(*rank));
    from = end + 1;
  }
  return ranks;
}

// The ranks holding a digest other than the majority's (held by more than half of `held`); every
// rank when no digest has a majority (two replicas that disagree, or a split).
std::vector<int> disagreeing(const std::map<int, int64_t>& held, bool* by_majority) {
  std::map<int64_t, int> count;
  for (const auto& [rank, digest] : held) ++count[digest];
  if (count.size() < 2) return {};
  for (const auto& [digest, n] : count) {
    if (2 * n > static_cast<int>(held.size())) {
      *by_majority = true;
      std::vector<int> out;
      for (const auto& [rank, d] : held) {
        if (d != digest) out.push_back(rank);
      }
      return out;
    }
  }
  *by_majority = false;
  std::vector<int> out;
  for (const auto& [rank, d] : held) out.push_back(rank);
  return out;
}

// rank → parameter → digest, for the ranks that recorded one step; and that step's parameters in
// the model's order (the longest list recorded).
struct StepHeld {
  std::map<int, std::map<std::string, int64_t>> by_rank;
  const StepDigests* order = nullptr;
};

StepHeld heldAt(const std::map<int, std::map<int64_t, StepDigests>>& digests, const std::vector<int>& ranks,
                int64_t step) {
  StepHeld at;
  for (int r : ranks) {
    auto it = digests.find(r);
    if (it == digests.end()) continue;
    auto s = it->second.find(step);
    if (s == it->second.end()) continue;
    auto& of = at.by_rank[r];
    for (const auto& [parameter, digest] : s->second) of.emplace(parameter, digest);
    if (!at.order || s->second.size() > at.order->size()) at.order = &s->second;
  }
  return at;
}

// The first parameter, in the model's order, whose digests differ among the ranks of `at`, with
// every rank that disagrees on any parameter; none when each parameter's digests agree (or none
// were kept at this step). The whole model's digest (parameter "") is not a parameter.
std::optional<ReplicaDivergence> parameterDivergence(const StepHeld& at, int64_t step) {
  std::optional<ReplicaDivergence> found;
  std::set<int> off;
  for (const auto& [parameter, unused] : *at.order) {
    if (parameter.empty()) continue;
    std::map<int, int64_t> held;
    for (const auto& [r, of] : at.by_rank) {
      if (auto d = of.find(parameter); d != of.end()) held.emplace(r, d->second);
    }
    if (held.size() < 2) continue;
    bool by_majority = false;
    std::vector<int> ranks_off = disagreeing(held, &by_majority);
    if (ranks_off.empty()) continue;
    if (!found)
      found =
          ReplicaDivergence{.step = step, .by_majority = by_majority, .parameter = parameter, .parameter_step = step};
    found->by_majority = found->by_majority && by_majority;
    off.insert(ranks_off.begin(), ranks_off.end());
  }
  if (found) found->ranks.assign(off.begin(), off.end());
  return found;
}

// The first divergence among `ranks` (one replica group), comparing each step that two or more
// of them recorded; adds the steps compared (after the divergence too) and the ranks that took part.
// A step's whole-model digests decide whether it diverged, where every rank holds one; the first
// parameter that differs is named from the first step from there whose per-parameter digests were
// kept (store/replica_digest_rows.h): a parameter that went wrong stays wrong on its rank.
std::optional<ReplicaDivergence> firstDivergence(const std::map<int, std::map<int64_t, StepDigests>>& digests,
                                                 const std::vector<int>& ranks, std::set<int64_t>* steps,
                                                 std::set<int>* compared) {
  std::set<int64_t> all_steps;
  for (int r : ranks) {
    if (auto it = digests.find(r); it != digests.end()) {
      for (const auto& [step, rows] : it->second) all_steps.insert(step);
    }
  }
  std::optional<ReplicaDivergence> first;
  for (auto step_it = all_steps.begin(); step_it != all_steps.end(); ++step_it) {
    const int64_t step = *step_it;
    const StepHeld at = heldAt(digests, ranks, step);
    if (at.by_rank.size() < 2) continue;
    steps->insert(step);
    for (const auto& [r, of] : at.by_rank) compared->insert(r);
    if (first) continue;  // later steps count as compared; the first divergence is the finding
    std::map<int, int64_t> whole;
    for (const auto& [r, of] : at.by_rank) {
      if (auto d = of.find(""); d != of.end()) whole.emplace(r, d->second);
    }
    if (whole.size() < at.by_rank.size()) {  // no whole-model digest to go by: each parameter's
      first = parameterDivergence(at, step);
      continue;
    }
    bool by_majority = false;
    std::vector<int> off = disagreeing(whole, &by_majority);
    if (off.empty()) continue;
    first = ReplicaDivergence{.step = step, .ranks = off, .by_majority = by_majority};
    for (auto later = step_it; later != all_steps.end(); ++later) {
      if (auto named = parameterDivergence(heldAt(digests, ranks, *later), *later)) {
        first->parameter = named->parameter;
        first->parameter_step = *later;
        break;
      }
    }
  }
  return first;
}

}  // namespace

ReplicaCheck checkReplicas(const store::RunData& run) {
  ReplicaCheck check;
  // The groups as their ranks recorded them: a rank counts in a group that lists it.
  std::map<std::string, std::vector<int>> groups;
  for (const store::RankInfo& info : run.ranks) {
    if (const std::string* sharded = store::metaText(info.meta, kReplicaShardedMeta); sharded && *sharded == "1")
      check.sharded = true;
    const std::string* group = store::metaText(info.meta, kReplicaGroupMeta);
    if (!group) continue;
    const std::vector<int> listed = ranksOfGroup(*group);
    if (std::find(listed.begin(), listed.end(), info.rank) != listed.end()) groups[*group].push_back(info.rank);
  }
  std::map<int, std::map<int64_t, StepDigests>> digests;
  for (const ReplicaDigestRecord& d : run.replica_digests) digests[d.rank][d.step].emplace_back(d.parameter, d.digest);
  std::set<int> compared;
  std::set<int64_t> steps;  // a step compared in two groups (HSDP's) is one step
  for (const auto& [group, ranks] : groups) {
    std::set<int> in_group;
    std::optional<ReplicaDivergence> found = firstDivergence(digests, ranks, &steps, &in_group);
    if (found && (!check.first_divergence || found->step < check.first_divergence->step))
      check.first_divergence = found;
    if (in_group.size() >= 2) check.groups.emplace_back(in_group.begin(), in_group.end());
    compared.insert(in_group.begin(), in_group.end());
  }
  std::sort(check.groups.begin(), check.groups.end());
  check.ranks.assign(compared.begin(), compared.end());
  check.steps = static_cast<int64_t>(steps.size());
  check.checked = check.steps > 0;
  if (!check.checked) {
    check.why_not = check.sharded    ? "the parameters are sharded (FSDP, DTensor)"
                    : groups.empty() ? "no parameters replicated across ranks (DDP, HSDP) were recorded"
                                     : "no two ranks that replicate their parameters recorded digests of one step";
  }
  return check;
}

namespace {

// "0 and 1", "0, 1, 2".
std::string rankList(const std::vector<int>& ranks) {
  std::vector<std::string> each;
  for (int r : ranks) each.push_back(std::to_string(r));
  return joined(each, ranks.size() == 2 ? " and " : ", ");
}

}  // namespace

std::string ranksText(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankList(ranks);
}

std::string parameterText(const ReplicaDivergence& d) {
  if (d.parameter.empty()) return "no parameter named: no per-parameter digests were kept from that step on";
  return "first in " + d.parameter +
         (d.parameter_step > d.step ? " (by the per-parameter digests of step " + std::to_string(d.parameter_step) + ")"
                                    : "");
}

std::string replicaCheckText(const ReplicaCheck& r, StepUnit unit) {
  if (!r.checked) return r.sharded ? "not compared: " + r.why_not : "";
  std::string out = ranksText(r.ranks);
  if (r.groups.size() > 1) {  // "ranks 0, 1, 2, 3 (replica groups 0 and 2; 1 and 3)"
    std::vector<std::string> each;
    for (const std::vector<int>& g : r.groups) each.push_back(rankList(g));
    out += " (replica groups " + joined(each, "; ") + ")";
  }
  out += " compared after each of " + std::to_string(r.steps) + " steps: ";
  if (!r.first_divergence) return out + "bit for bit equal";
  const ReplicaDivergence& d = *r.first_divergence;
  return out + "diverged at " + stepLabel(unit, d.step) + " (" + ranksText(d.ranks) + ", " + parameterText(d) + ")";
}

}  // namespace nanprov::report
