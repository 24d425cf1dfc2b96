// The kernels of one call, for people and scripts: short names, the main kernel, JSON.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "store/reader.h"
#include "store/replayed_kernels.h"

namespace nanprov {

nlohmann::json kernelsJson(const CallKernels& kernels);

// The kernels shown for a call, by where they come from (`from`):
//  - run: its own, traced by CUPTI in the run (on the CPU: its ATen op);
//  - replay: when it ran after kernel tracing stopped, those a replay of its capture traced on
//    the same GPU model (nanprov run replays the first edge's capture for this; nanprov replay
//    keeps them too);
//  - inferred: else those of the latest traced call with the same rank, layer, phase, op and
//    tensor shapes and dtypes, which usually launches the same kernels, but not when the bug
//    comes with a change of mask or backend;
//  - empty: unknown.
struct KernelsOfCall {
  CallKernels kernels;
  std::string from;
  const CallRecord* inferred_from = nullptr;
  std::string replayed_on;  // the GPU of the replay, for `replay`
};

class CallKernelIndex {
 public:
  explicit CallKernelIndex(const RunData& run);
  KernelsOfCall of(const CallRecord& call) const;

 private:
  const ReplayedKernels* replayedKernelsOf(const CallRecord& call) const;

  const RunData& run_;
  std::map<std::string, const CallRecord*> traced_;  // signature → latest call with kernels
  // Capture path → what a replay traced (nullopt: none), read once; the records stay put.
  mutable std::map<std::string, std::optional<ReplayedKernels>> replayed_;
};

// "CUPTI", "the ATen CPU op", "traced in a replay ...", "inferred from ...", or the reason the
// kernels are not known.
std::string attributionOf(const CallRecord& call, const KernelsOfCall& kernels);

}  // namespace nanprov
