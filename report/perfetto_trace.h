// A run as a timeline: Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.
// A process per rank; on it a track for the training thread (forward calls, inside their optimizer
// steps), one for autograd (backward calls), and one per CUDA stream the tracer saw (kernels, with
// a flow arrow from the call that launched each). The first non-finite edge is marked. Pure logic
// over a loaded run, for `nanprov trace` and its tests.
#pragma once

#include <nlohmann/json.hpp>

#include "report/edges.h"
#include "store/reader.h"

namespace nanprov {

// Names of the tracks ("thread_name" metadata), for readers of the trace.
inline constexpr const char* kTrainingThreadTrack = "training thread";
inline constexpr const char* kAutogradTrack = "autograd";

// {"traceEvents": [...], "otherData": {...}}: timestamps in µs from the run's earliest event
// across ranks, and every track's slices nested (Perfetto draws no overlapping ones). `run` must
// hold every call (RunScope::kAll); `findings` is analyze(run).
nlohmann::json perfettoTrace(const RunData& run, const Findings& findings);

// Whether the run's times make a timeline: every call and kernel ends after it starts, after the
// epoch, and the whole run spans less than a year. A damaged store's times would otherwise
// overflow the arithmetic and give a trace no viewer can place.
Status checkTraceTimes(const RunData& run);

}  // namespace nanprov
