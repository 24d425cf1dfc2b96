// Edge analysis: which call first turned finite inputs into non-finite outputs, across a run.
// Pure logic over stored CallRecords (no SQLite, no LibTorch), shared by report, calls and run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/records/call_health.h"
#include "base/records/call_name.h"
#include "base/records/call_record.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

struct Propagation {
  int64_t calls = 0;  // non-finite calls from the first edge on, the edge included
  int64_t layers = 0;
  int64_t ranks = 0;
};

// Where the first non-finite values came from: attention made them (the first edge is a source
// edge), or they reached attention from upstream (its inputs were already bad).
enum class Origin { kNone, kAttention, kUpstream };
const char* originName(Origin o);  // "attention" | "upstream" (JSON); kNone has no edge to name

struct Findings {
  // The earliest call, across ranks by (step, time), that touched a non-finite value.
  std::optional<size_t> first;  // index into RunData::calls
  CallHealth first_health;
  Origin origin = Origin::kNone;
  // The earliest source edge; differs from `first` when the origin is upstream.
  std::optional<size_t> first_source;
  Propagation propagation;
};

// `calls` must be ordered by (step, start time), as loadRun() returns them.
Findings analyze(const std::vector<CallRecord>& calls);

// The same over a loaded run; a run read for its edges only (RunScope::kEdges) takes its
// propagation from the store's counts over the calls that are not clean.
Findings analyze(const store::RunData& run);

}  // namespace nanprov::report
