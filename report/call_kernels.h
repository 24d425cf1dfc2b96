// The kernels of one call, for people and scripts: which they were, where that is known from,
// in words, and as JSON.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/records/call_record.h"

namespace nanprov::store {
struct RunData;
struct ReplayedKernels;
}  // namespace nanprov::store

namespace nanprov::report {

nlohmann::json kernelsJson(const std::vector<KernelRecord>& kernels);

// The kernels shown for a call, by where they come from (`from`):
//  - run: its own, traced by CUPTI in the run (on the CPU: its ATen op);
//  - replay: when it ran after kernel tracing stopped, those a replay of its capture traced on
//    the same GPU model (nanprov run replays the first edge's capture for this; nanprov replay
//    keeps them too);
//  - inferred: else those of the latest traced call with the same rank, layer, phase, op and
//    tensor shapes and dtypes, which usually launches the same kernels, but not when the bug
//    comes with a change of mask or backend;
//  - empty: unknown.
// Owned: it outlives the run and the replay's file it was read from.
struct KernelsOfCall {
  std::vector<KernelRecord> kernels;  // launch order
  std::string from;
  std::string inferred_from;  // the traced call whose kernels these are ("" unless inferred)
  // "CUPTI", "the ATen CPU op", "traced in a replay ...", "inferred from ...", or the reason the
  // kernels are not known.
  std::string attribution;
};

class CallKernelIndex {
 public:
  explicit CallKernelIndex(const store::RunData& run);
  ~CallKernelIndex();
  KernelsOfCall of(const CallRecord& call) const;

 private:
  const store::ReplayedKernels* replayedKernelsOf(const CallRecord& call) const;

  const store::RunData& run_;
  std::map<std::string, const CallRecord*> traced_;  // signature → latest call with kernels
  // Capture path → what a replay traced (nullptr: none), read once.
  mutable std::map<std::string, std::unique_ptr<store::ReplayedKernels>> replayed_;
};

}  // namespace nanprov::report
