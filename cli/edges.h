// Edge analysis: which call first turned finite inputs into non-finite outputs. Pure logic over
// stored CallRecords (no SQLite, no LibTorch), shared by report, calls and run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/call_record.h"

namespace nanprov {

enum class EdgeKind { kClean, kSourceEdge, kPropagated };
const char* edgeKindName(EdgeKind k);  // "clean" | "source" | "propagated"

struct CallHealth {
  EdgeKind kind = EdgeKind::kClean;
  bool inputs_finite = true;
  std::vector<std::string> nonfinite_inputs;   // roles, in stored order
  std::vector<std::string> nonfinite_outputs;
};

// Non-finite values of `t` that count as a fault. -inf is legal in a mask, and in LSE for a call
// whose mask hides whole rows (log of an empty sum).
int64_t faultyValues(const TensorHealth& t, bool call_masks_rows);

// Source edge: every checked input finite, some output not. Propagated: some input not finite.
CallHealth classify(const CallRecord& call);

// "rank1:layer33:call45", the name the seeds use.
std::string callName(const CallRecord& call);

struct Propagation {
  int64_t calls = 0;   // non-finite calls from the first edge on, the edge included
  int64_t layers = 0;
  int64_t ranks = 0;
};

struct Findings {
  // The earliest call, across ranks by (step, time), that touched a non-finite value.
  std::optional<size_t> first;        // index into RunData::calls
  CallHealth first_health;
  // "attention" when `first` is a source edge, "upstream" when its inputs were already bad.
  std::string origin;
  // The earliest source edge; differs from `first` when the origin is upstream.
  std::optional<size_t> first_source;
  Propagation propagation;
};

// `calls` must be ordered by (step, start time), as loadRun() returns them.
Findings analyze(const std::vector<CallRecord>& calls);

}  // namespace nanprov
