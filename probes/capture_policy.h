// CapturePolicy: which checked calls are captured (DESIGN.md, "Capture and replay"). By default
// the first source edge of this rank; also every call a --capture selector matches, every Nth
// call with --capture-every N, and with --audit the first clean call of each call signature (again
// every --audit-every steps), which `nanprov run` then judges against the float64 reference
// (DESIGN.md, "Audit"). Each within a byte budget per rank (audits have their own): a call that
// does not fit is skipped, and the store says so. No LibTorch: unit-tested on plain records.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <mutex>
#include <string>
#include <vector>

#include "probes/call_selector.h"
#include "store/call_record.h"
#include "base/status.h"

namespace nanprov {

inline constexpr int64_t kDefaultCaptureBytes = int64_t{1} << 30;
inline constexpr int64_t kDefaultAuditBytes = int64_t{256} << 20;
// A call whose tensors are bigger is audited on a slice of its (batch, head) pairs (audit_slice.h).
inline constexpr int64_t kDefaultAuditSliceBytes = int64_t{16} << 20;

struct AuditPlan {
  bool on = false;                                  // --audit
  int64_t every_steps = 0;                          // --audit-every; 0: each signature once
  int64_t budget_bytes = kDefaultAuditBytes;        // --audit-max-bytes
  int64_t slice_bytes = kDefaultAuditSliceBytes;    // --audit-slice-bytes
};

struct CapturePlan {
  bool first_source_edge = true;        // off with `nanprov run --no-capture`
  std::vector<CallSelector> selectors;  // --capture
  int64_t every = 0;                    // --capture-every; 0: off
  int64_t budget_bytes = kDefaultCaptureBytes;
  AuditPlan audit;
};

// One --capture selector: comma-separated key=value pairs of rank, layer, step, call, phase.
StatusOr<CallSelector> parseCaptureSelector(const std::string& text);

// From NANPROV_CAPTURE (selectors separated by ';'), NANPROV_CAPTURE_EVERY,
// NANPROV_CAPTURE_BYTES, NANPROV_CAPTURE_FIRST_EDGE=0 and NANPROV_AUDIT, NANPROV_AUDIT_EVERY,
// NANPROV_AUDIT_BYTES, NANPROV_AUDIT_SLICE_BYTES, as `nanprov run` sets them.
StatusOr<CapturePlan> capturePlanFromEnvironment();

class CapturePolicy {
 public:
  void configure(CapturePlan plan);

  // Why `rec`, whose health is known, is captured: "first-source-edge", "selector", "every" or
  // "audit". Empty when it is not. The first source edge is claimed by the first call that asks;
  // an audit by the first clean call of `audit_key` (its signature, hashed: auditKey() in
  // call_capture.cpp), and again once --audit-every steps have passed since.
  std::string triggerFor(const CallRecord& rec, std::optional<uint64_t> audit_key = std::nullopt);

  // Whether audits are on: only then is a call's audit key worth working out.
  bool auditing() const { return auditing_.load(std::memory_order_relaxed); }
  AuditPlan auditPlan();

  // Takes `bytes` from the trigger's budget (audits have their own); false, taking nothing, when
  // they do not fit.
  bool reserve(int64_t bytes, const std::string& trigger = "");

 private:
  std::mutex mu_;
  CapturePlan plan_;
  std::atomic<bool> auditing_{false};  // plan_.audit.on, read on every call without the lock
  bool source_edge_taken_ = false;
  int64_t used_bytes_ = 0;
  int64_t audit_used_bytes_ = 0;
  std::unordered_map<uint64_t, int64_t> audited_at_;  // audit key → step of its last audit
};

}  // namespace nanprov
