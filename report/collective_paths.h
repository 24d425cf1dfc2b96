// How non-finite values reached a rank through a collective: the rank's first collective that
// took a finite input there and gave a non-finite output, and the ranks whose input to that same
// collective was non-finite (a collective is one (group, step, ordinal) on every rank). Such a
// rank made nothing: it is named with the collective and the ranks the values came from, never
// told "outside attention".
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/records/call_record.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

struct CollectivePath {
  int rank = 0;
  int64_t step = 0;
  std::string op;         // "c10d::allreduce_"
  std::string group;      // the process group's name
  int64_t ord = 0;        // the collective's ordinal among its group's in the step
  std::vector<int> from;  // ranks whose input to it was non-finite
  // No rank's recorded input to it was non-finite, and every rank of the job was read: the
  // collective itself made the values (a sum that overflowed).
  bool made_by_collective = false;
  // The parameters whose gradients the gradient sentinel found non-finite on this rank at this step.
  std::vector<std::string> parameters;
};

// One per rank that received non-finite values through a collective, by rank.
std::vector<CollectivePath> collectivePaths(const store::RunData& run);

// The (rank, step) pairs whose values went non-finite through a collective.
std::set<std::pair<int, int64_t>> receivedThroughCollective(const std::vector<CollectivePath>& paths);

// "rank 0: gradients went non-finite at step 3 in c10d::allreduce_ (carrying embed.weight, ...):
// its input was finite here and non-finite on rank 1". `carrying`: the parameters' names as the
// caller lists them ("" when none are known).
std::string collectivePathText(const CollectivePath& path, StepUnit unit, const std::string& carrying);
nlohmann::json collectivePathJson(const CollectivePath& path);

}  // namespace nanprov::report
