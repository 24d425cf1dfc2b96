// The captured backend rerun on the captured inputs, N times (nanprov replay --reruns), on the
// replay's device and on every other visible GPU of the same model, each result compared bit for
// bit with the others and with the run's own outputs, and judged as the first run was: does the
// run's result recur every time, k of N times, or never while every rerun computes the same bits?
// When only some reruns give it, the other backends are rerun as often, to say whether the call
// or the kernel is unstable.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "replay/captured_call.h"
#include "replay/outputs.h"
#include "replay/replay_result.h"

namespace nanprov::replay {

// Judges one backend's raw outputs as the replay judged its first run (padding zeroed, compared
// with the reference).
using JudgeOutputs = std::function<BackendRun(BackendRun, Outputs)>;

struct RerunRequest {
  const CapturedCall* call = nullptr;
  at::Device device = at::kCPU;
  int runs = 5;                          // in all, the replay's first run of each backend among them
  const BackendRun* captured = nullptr;  // the run's own outputs, judged
  Outputs captured_outputs;              // and raw, for the bitwise comparison
};

// `first` holds each backend's first run as replay judged it; `original_outputs` the raw outputs
// of the captured backend's (counted as its first rerun). Other backends, when asked, are rerun
// `runs` times afresh.
Reruns rerunBackends(const RerunRequest& request, const std::vector<BackendRun>& first, const Outputs& original_outputs,
                     const JudgeOutputs& judge, const std::function<void(const std::string&)>& stage);

// Whether `a` and `b` hold the same bits in every tensor both have (at least one).
bool bitwiseEqual(const Outputs& a, const Outputs& b);

}  // namespace nanprov::replay
