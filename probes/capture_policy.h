// CapturePolicy: which checked calls are captured (DESIGN.md, "Capture and replay"). By default
// the first source edge of this rank; also every call a --capture selector matches, and every
// Nth call with --capture-every N (audit samples). All within a byte budget per rank: a call that
// does not fit is skipped, and the store says so. No LibTorch: unit-tested on plain records.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "probes/call_selector.h"
#include "store/call_record.h"
#include "store/status.h"

namespace nanprov {

inline constexpr int64_t kDefaultCaptureBytes = int64_t{1} << 30;

struct CapturePlan {
  bool first_source_edge = true;        // off with `nanprov run --no-capture`
  std::vector<CallSelector> selectors;  // --capture
  int64_t every = 0;                    // --capture-every; 0: off
  int64_t budget_bytes = kDefaultCaptureBytes;
};

// One --capture selector: comma-separated key=value pairs of rank, layer, step, call, phase.
StatusOr<CallSelector> parseCaptureSelector(const std::string& text);

// From NANPROV_CAPTURE (selectors separated by ';'), NANPROV_CAPTURE_EVERY,
// NANPROV_CAPTURE_BYTES and NANPROV_CAPTURE_FIRST_EDGE=0, as `nanprov run` sets them.
StatusOr<CapturePlan> capturePlanFromEnvironment();

class CapturePolicy {
 public:
  void configure(CapturePlan plan);

  // Why `rec`, whose health is known, is captured: "first-source-edge", "selector" or "every".
  // Empty when it is not. The first source edge is claimed by the first call that asks.
  std::string triggerFor(const CallRecord& rec);

  // Takes `bytes` from the budget; false, taking nothing, when they do not fit.
  bool reserve(int64_t bytes);

 private:
  std::mutex mu_;
  CapturePlan plan_;
  bool source_edge_taken_ = false;
  int64_t used_bytes_ = 0;
};

}  // namespace nanprov
