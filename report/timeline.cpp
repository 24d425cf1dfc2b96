#include "report/timeline.h"

#include <algorithm>
#include <climits>

#include "base/records/call_name.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

Status checkTimes(const store::RunData& run) {
  constexpr int64_t kYearNs = 366LL * 24 * 3600 * 1000000000LL;
  int64_t earliest = INT64_MAX, latest = 0;
  auto check = [&](const std::string& what, int64_t start, int64_t end) {
    if (start <= 0 || end < start || end - start > kYearNs) {
      return Status::Error(what + " has times " + std::to_string(start) + ".." + std::to_string(end) +
                           " ns that no timeline can hold: the store is damaged");
    }
    earliest = std::min(earliest, start), latest = std::max(latest, end);
    return Status::Ok();
  };
  for (const CallRecord& c : run.calls) NANPROV_RETURN_IF_ERROR(check(callName(c), c.start_ns, c.end_ns));
  for (const KernelRecord& k : run.kernels) {
    NANPROV_RETURN_IF_ERROR(check("rank " + std::to_string(k.rank) + " kernel " + k.name, k.start_ns, k.end_ns));
  }
  if (latest > earliest && latest - earliest > kYearNs) {
    return Status::Error("the run's times span more than a year: the store is damaged");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Timeline> timelineOf(store::RunData window, const Findings& findings) {
  NANPROV_RETURN_IF_ERROR(checkTimes(window));
  Timeline t{.run = window.dir,
             .step_unit = window.stepUnit(),
             .first_edge = findings.first,
             .first_source_edge = findings.first_source,
             .origin = findings.origin};
  for (const store::RankInfo& r : window.ranks) {
    t.ranks.push_back({.rank = r.rank, .step_ends_ns = r.step_ends_ns, .summarised = r.summarised_stretches});
  }
  t.calls.reserve(window.calls.size());
  for (CallRecord& c : window.calls) {
    TimelineCall call{.health = classify(c)};
    for (const KernelRecord* k : window.kernelsOf(c.rank, c.seq)) {
      if (k->device >= 0) call.kernels.push_back(*k);
    }
    call.call = std::move(c);
    t.calls.push_back(std::move(call));
  }
  return t;
}

}  // namespace nanprov::report
