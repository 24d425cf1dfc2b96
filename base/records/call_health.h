// Whether one call is clean, a source edge or propagated, from its tensors' health. Plain logic
// over CallRecords (no LibTorch): the probes use it to decide what to capture, the CLI to report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/records/call_event.h"
#include "base/records/call_record.h"

namespace nanprov {

enum class EdgeKind { kClean, kSourceEdge, kPropagated };
const char* edgeKindName(EdgeKind k);  // "clean" | "source" | "propagated"

struct CallHealth {
  EdgeKind kind = EdgeKind::kClean;
  bool inputs_finite = true;
  std::vector<std::string> nonfinite_inputs;  // roles, in stored order
  std::vector<std::string> nonfinite_outputs;
};

// Non-finite values of `t` that count as a fault. -inf is legal in a mask, and in LSE for a call
// whose mask hides whole rows (log of an empty sum).
int64_t faultyValues(const TensorHealth& t, bool call_masks_rows);

// Source edge: every checked input finite, some output not. Propagated: some input not finite.
CallHealth classify(const CallRecord& call);
// classify(call).kind without naming the roles: what the probes store with every call.
EdgeKind edgeKindOf(const CallRecord& call);
EdgeKind edgeKindOf(const CallEvent& call);  // the same, on the training thread

}  // namespace nanprov
