// A run as a timeline: Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.
// A process per rank; on it a track for the training thread (forward calls, inside their optimizer
// steps), one for autograd (backward calls), and one per CUDA stream the tracer saw (kernels, with
// a flow arrow from the call that launched each); steps the store budget summarised are marked on
// a track of their own. The first non-finite edge is marked. Renders a
// window's timeline (report/timeline.h) and reads nothing else, for `nanprov trace` and its tests.
#pragma once

#include <nlohmann/json.hpp>

#include "report/timeline.h"

namespace nanprov::report {

// Names of the tracks ("thread_name" metadata), for readers of the trace.
inline constexpr const char* kTrainingThreadTrack = "training thread";
inline constexpr const char* kAutogradTrack = "autograd";
// Steps whose calls the store budget summarised, a slice per stretch of them.
inline constexpr const char* kSummarisedTrack = "summarised by the store budget";

// {"traceEvents": [...], "otherData": {...}}: timestamps in µs from the window's earliest event
// across ranks, and every track's slices nested (Perfetto draws no overlapping ones).
nlohmann::json perfettoTrace(const Timeline& timeline);

}  // namespace nanprov::report
