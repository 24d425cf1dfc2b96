#include "probes/capture_policy.h"

#include <cstdlib>

#include "probes/call_health.h"
#include "probes/session.h"

namespace nanprov {

StatusOr<CallSelector> parseCaptureSelector(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::Error("bad --capture '" + text + "': " + why + " (example: layer=3,phase=bwd,step=5)");
  };
  CallSelector selector;
  auto pairs = splitKeyValues(text);
  if (!pairs.ok()) return bad(pairs.status().message());
  if (pairs->empty()) return bad("empty selector");
  for (const auto& [key, val] : *pairs) {
    bool ok = true;
    if (!readSelectorKey(&selector, key, val, &ok)) {
      return bad("unknown key '" + key + "'; keys are rank, layer, step, call, phase");
    }
    if (!ok) return bad("bad value for " + key + ": '" + val + "'");
  }
  return selector;
}

StatusOr<CapturePlan> capturePlanFromEnvironment() {
  CapturePlan plan;
  if (const char* spec = std::getenv("NANPROV_CAPTURE"); spec && *spec) {
    for (const std::string& one : splitList(spec, ';')) {
      auto selector = parseCaptureSelector(one);
      if (!selector.ok()) return selector.status();
      plan.selectors.push_back(*selector);
    }
  }
  plan.every = envInteger("NANPROV_CAPTURE_EVERY", 0, 0);
  plan.budget_bytes = envInteger("NANPROV_CAPTURE_BYTES", kDefaultCaptureBytes, 0);
  plan.first_source_edge = envInteger("NANPROV_CAPTURE_FIRST_EDGE", 1, 0) != 0;
  plan.audit.on = envInteger("NANPROV_AUDIT", 0, 0) != 0;
  plan.audit.every_steps = envInteger("NANPROV_AUDIT_EVERY", 0, 0);
  plan.audit.budget_bytes = envInteger("NANPROV_AUDIT_BYTES", kDefaultAuditBytes, 0);
  plan.audit.slice_bytes = envInteger("NANPROV_AUDIT_SLICE_BYTES", kDefaultAuditSliceBytes, 0);
  return plan;
}

void CapturePolicy::configure(CapturePlan plan) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = std::move(plan);
  auditing_ = plan_.audit.on;
}

AuditPlan CapturePolicy::auditPlan() {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_.audit;
}

std::string CapturePolicy::triggerFor(const CallRecord& rec, std::optional<uint64_t> audit_key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const CallSelector& s : plan_.selectors) {
    if (s.matches(rec)) return "selector";
  }
  if (plan_.every > 0 && rec.seq % plan_.every == 0) return "every";
  const bool wants_kind = (plan_.first_source_edge && !source_edge_taken_) || (plan_.audit.on && audit_key);
  const EdgeKind kind = wants_kind ? classify(rec).kind : EdgeKind::kClean;
  if (plan_.first_source_edge && !source_edge_taken_ && kind == EdgeKind::kSourceEdge) {
    source_edge_taken_ = true;
    return "first-source-edge";
  }
  // Only finite calls are audited: a non-finite one is an edge already, and the reference needs
  // finite inputs.
  if (plan_.audit.on && audit_key && kind == EdgeKind::kClean) {
    auto [it, first] = audited_at_.emplace(*audit_key, rec.step);
    if (first) return "audit";
    if (plan_.audit.every_steps > 0 && rec.step - it->second >= plan_.audit.every_steps) {
      it->second = rec.step;
      return "audit";
    }
  }
  return "";
}

bool CapturePolicy::reserve(int64_t bytes, const std::string& trigger) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool audit = trigger == "audit";
  int64_t& used = audit ? audit_used_bytes_ : used_bytes_;
  if (used + bytes > (audit ? plan_.audit.budget_bytes : plan_.budget_bytes)) return false;
  used += bytes;
  return true;
}

}  // namespace nanprov
