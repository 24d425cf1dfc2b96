// A window of a run as its timeline shows it (`nanprov trace`, report/perfetto_trace.h): the
// window's calls with their health and CUDA kernels, the ends of its ranks' steps, and which calls
// are the run's edges. Built from a window of the stores (store/reader.h: loadRunWindow), so a
// timeline of any run stays bounded; the trace renders it and reads nothing else.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_health.h"
#include "base/records/call_record.h"
#include "base/records/summarised.h"
#include "base/status.h"
#include "report/edges.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

struct TimelineCall {
  CallRecord call;
  CallHealth health;
  std::vector<KernelRecord> kernels;  // its CUDA kernels, as CUPTI traced them (a CPU call's op is the call)
};

struct TimelineRank {
  int rank = 0;
  // When each step ended (the optimizer's step post hook, or in inference the next forward pass
  // opening), step → CLOCK_REALTIME ns.
  std::map<int64_t, int64_t> step_ends_ns;
  // Steps of the window whose calls the store budget summarised: they have no call rows, so no
  // call slices; the trace marks them instead of leaving a gap.
  std::vector<SummarisedStretch> summarised;
};

struct Timeline {
  std::string run;  // the run's directory, as given
  StepUnit step_unit = StepUnit::kOptimizerStep;
  std::vector<TimelineRank> ranks;
  std::vector<TimelineCall> calls;  // ordered by (step, start_ns, rank, seq)
  // Indices into calls; none when the window does not hold it.
  std::optional<size_t> first_edge, first_source_edge;
  Origin origin = Origin::kNone;
};

// The window is taken whole: its calls move into the timeline, so they are held once. `findings`
// indexes its calls (analyze over the whole run, its edges found in the window). Refuses times no timeline can hold:
// every call and kernel must end after it starts, after the epoch, and the whole window span less than a year; a
// damaged store's times would otherwise overflow the arithmetic and give a trace no viewer can place.
StatusOr<Timeline> timelineOf(store::RunData window, const Findings& findings);

}  // namespace nanprov::report
