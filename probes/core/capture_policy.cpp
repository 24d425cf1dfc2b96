#include "probes/core/capture_policy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <tuple>

#include "base/env.h"
#include "base/records/call_health.h"

namespace nanprov::probes {

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
      return bad("unknown key '" + key + "'; keys are rank, layer, step, from-step, call, phase");
    }
    if (!ok) return bad("bad value for " + key + ": '" + val + "'");
  }
  return selector;
}

StatusOr<CapturePlan> capturePlanFromEnvironment() {
  CapturePlan plan;
  if (const char* spec = std::getenv("NANPROV_CAPTURE"); spec && *spec) {
    for (const std::string& one : splitList(spec, ';')) {
      NANPROV_ASSIGN_OR_RETURN(auto selector, parseCaptureSelector(one));
      plan.selectors.push_back(selector);
    }
  }
  plan.every = envInteger("NANPROV_CAPTURE_EVERY", 0, 0);
  plan.budget_bytes = envInteger("NANPROV_CAPTURE_BYTES", kDefaultCaptureBytes, 0);
  plan.first_source_edge = envInteger("NANPROV_CAPTURE_FIRST_EDGE", 1, 0) != 0;
  plan.edge_reruns = envInteger("NANPROV_RERUNS", kDefaultEdgeReruns, 0);
  plan.rerun_user_ops = envInteger("NANPROV_RERUN_USER_OPS", 0, 0) != 0;
  plan.audit.on = envInteger("NANPROV_AUDIT", 0, 0) != 0;
  plan.audit.every_steps = envInteger("NANPROV_AUDIT_EVERY", 0, 0);
  // Hundredths of a percent, so the environment carries a whole number.
  plan.audit.budget_percent = static_cast<double>(envInteger("NANPROV_AUDIT_BUDGET_CENTIPERCENT",
                                                             static_cast<int64_t>(kDefaultAuditPercent * 100), 0)) /
                              100;
  plan.audit.budget_bytes = envInteger("NANPROV_AUDIT_BYTES", kDefaultAuditBytes, 0);
  plan.audit.slice_bytes = envInteger("NANPROV_AUDIT_SLICE_BYTES", kDefaultAuditSliceBytes, 0);
  return plan;
}

void CapturePolicy::configure(CapturePlan plan, ProgressReader progress, Clock clock) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = std::move(plan);
  progress_ = std::move(progress);
  clock_ = clock ? std::move(clock) : Clock([] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  });
  auditing_ = plan_.audit.on;
  edges_only_ = plan_.selectors.empty() && plan_.every == 0 && !plan_.audit.on;
}

AuditPlan CapturePolicy::auditPlan() {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_.audit;
}

int64_t CapturePolicy::edgeReruns() {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_.edge_reruns;
}

bool CapturePolicy::rerunUserOps() {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_.rerun_user_ops;
}

std::optional<CaptureTrigger> CapturePolicy::triggerFor(const CallEvent& rec, std::optional<uint64_t> audit_key,
                                                        std::string* regime_change, bool* by_rotation) {
  if (edges_only_.load(std::memory_order_relaxed) && static_cast<EdgeKind>(rec.health) != EdgeKind::kSourceEdge) {
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const CallSelector& s : plan_.selectors) {
    if (s.matches(rec)) return CaptureTrigger::kSelector;
  }
  if (plan_.every > 0 && rec.seq % plan_.every == 0) return CaptureTrigger::kEvery;
  const bool wants_kind = (plan_.first_source_edge && !source_edge_taken_) || (plan_.audit.on && audit_key);
  const EdgeKind kind = wants_kind ? static_cast<EdgeKind>(rec.health) : EdgeKind::kClean;
  if (plan_.first_source_edge && !source_edge_taken_ && kind == EdgeKind::kSourceEdge) {
    source_edge_taken_ = true;
    return CaptureTrigger::kFirstSourceEdge;
  }
  // Only finite calls are audited: a non-finite one is an edge already, and the reference needs
  // finite inputs.
  if (!plan_.audit.on || !audit_key || kind != EdgeKind::kClean) return std::nullopt;
  if (started_ns_ < 0) started_ns_ = clock_();
  judged_on_device_ = judged_on_device_ || !rec.device.isCpu();
  const auto ordinal = static_cast<int64_t>(audited_.size());
  AuditedKey& key =
      audited_.try_emplace(*audit_key, AuditedKey{.layer = rec.layer, .phase = rec.phase, .ordinal = ordinal})
          .first->second;
  const ConditionRegime now = regimeOf(rec);
  const int slot = regimeSlot(key, now, rec.step);
  SeenRegime& seen = key.regimes[slot];
  const bool new_regime = seen.last_judged < 0;
  auto take = [&](bool for_new_regime = false, bool rotation = false) -> std::optional<CaptureTrigger> {
    key.by_rotation = rotation;
    if (by_rotation) *by_rotation = rotation;
    key.previous_step = key.last_step;
    key.last_step = rec.step;
    key.judged_slot = slot;
    key.for_new_regime = for_new_regime;
    seen.previous_judged = seen.last_judged;
    seen.last_judged = rec.step;
    if (for_new_regime) ++counts_.regime_changes;
    return CaptureTrigger::kAudit;
  };
  if (key.last_step < 0) return take();  // the first pass
  // A new regime is judged at its first call, whatever the rotation's budget: faults start when
  // the data changes. The budget governs the rotation alone.
  if (new_regime) {
    if (regime_change) {
      const SeenRegime* latest = nullptr;  // the regime judged last
      for (const SeenRegime& r : key.regimes) {
        if (r.last_judged >= 0 && (!latest || r.last_judged > latest->last_judged)) latest = &r;
      }
      if (latest) *regime_change = regimeChange(latest->regime, now) + " at step " + std::to_string(rec.step);
    }
    return take(true);
  }
  if (plan_.audit.every_steps > 0) {
    return rec.step % plan_.audit.every_steps == 0 ? take() : std::nullopt;
  }
  if (rec.step != rotation_step_) decideRotation(rec.step);
  if (rotation_layer_ && *rotation_layer_ == rec.layer && key.last_step < rec.step) return take(false, true);
  return std::nullopt;
}

int CapturePolicy::regimeSlot(AuditedKey& key, const ConditionRegime& now, int64_t step) {
  int slot = -1;
  for (size_t i = 0; i < key.regimes.size(); ++i) {
    if (!sameRegime(key.regimes[i].regime, now)) continue;
    if (key.regimes[i].last_judged >= 0) {
      slot = static_cast<int>(i);
      break;
    }
    if (slot < 0) slot = static_cast<int>(i);
  }
  if (slot < 0) {
    if (key.regimes.size() < kRegimesKept) {
      slot = static_cast<int>(key.regimes.size());
      key.regimes.emplace_back();
    } else {
      // A judged regime gives way first: one seen and never judged stays for the report to name.
      auto stalest = [&](bool judged) {
        int best = -1;
        for (size_t i = 0; i < key.regimes.size(); ++i) {
          if ((key.regimes[i].last_judged >= 0) != judged || static_cast<int>(i) == key.judged_slot) continue;
          if (best < 0 || key.regimes[i].last_seen < key.regimes[best].last_seen) best = static_cast<int>(i);
        }
        return best;
      };
      slot = stalest(true);
      if (slot < 0) slot = stalest(false);
      if (slot < 0) slot = 0;
    }
    key.regimes[slot] = SeenRegime{.regime = now, .text = regimeText(now), .first_seen = step, .last_seen = step};
  }
  SeenRegime& seen = key.regimes[slot];
  seen.last_seen = std::max(seen.last_seen, step);
  ++seen.calls;
  return slot;
}

void CapturePolicy::takeBack(AuditedKey& key) {
  key.last_step = key.previous_step;
  if (key.judged_slot >= 0) {
    SeenRegime& r = key.regimes[key.judged_slot];
    r.last_judged = r.previous_judged;
  }
  if (key.for_new_regime) --counts_.regime_changes;
  key.judged_slot = -1;
  key.for_new_regime = false;
}

std::map<std::string, AuditRegime> CapturePolicy::regimes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, AuditRegime> out;
  for (const auto& [hash, key] : audited_) {
    for (size_t i = 0; i < key.regimes.size(); ++i) {
      const SeenRegime& r = key.regimes[i];
      out["k" + std::to_string(key.ordinal) + ".r" + std::to_string(i)] = AuditRegime{.layer = key.layer,
                                                                                      .phase = key.phase,
                                                                                      .first_seen = r.first_seen,
                                                                                      .last_seen = r.last_seen,
                                                                                      .calls = r.calls,
                                                                                      .last_judged = r.last_judged,
                                                                                      .conditions = r.text};
    }
  }
  return out;
}

void CapturePolicy::decideRotation(int64_t step) {
  rotation_step_ = step;
  rotation_layer_.reset();
  const AuditedKey* stalest = nullptr;
  for (const auto& [hash, key] : audited_) {
    if (key.last_step < 0) continue;  // waiting for its first pass
    if (!stalest || std::tie(key.last_step, key.layer) < std::tie(stalest->last_step, stalest->layer)) stalest = &key;
  }
  if (!stalest || stalest->last_step >= step) return;
  if (!rotationAffordable()) {
    ++counts_.held_back;
    return;
  }
  rotation_layer_ = stalest->layer;
  ++counts_.rotations;
}

void CapturePolicy::catchUp() {
  if (!progress_) return;
  const int64_t judged = std::min(progress_().judged + lost_, written_);
  for (; judged_seen_ < judged && !outstanding_bytes_.empty(); ++judged_seen_) {
    outstanding_total_ -= outstanding_bytes_.front();
    outstanding_bytes_.pop_front();
  }
}

bool CapturePolicy::rotationAffordable() {
  if (plan_.audit.budget_percent >= kUnboundedAuditPercent) return true;
  if (!progress_) return false;
  catchUp();
  // The judge may trail the rotation by one cycle (a capture per audited key), so every layer is
  // judged again while a slow judge (on the CPU, a process of its own) catches up; the byte budget
  // bounds what waits. The first pass's and new regimes' captures never hold it back.
  const int64_t rotation_backlog = written_ - judged_seen_ - unpaced_written_;
  if (rotation_backlog >= static_cast<int64_t>(audited_.size())) return false;
  const int64_t judge_ns = judged_on_device_ ? progress_().judge_ns : 0;
  const double elapsed = static_cast<double>(clock_() - started_ns_);
  return static_cast<double>(audit_cost_ns_ + judge_ns) <= plan_.audit.budget_percent / 100 * elapsed;
}

bool CapturePolicy::reserve(int64_t bytes, CaptureTrigger trigger, std::optional<uint64_t> audit_key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (trigger != CaptureTrigger::kAudit) {
    if (used_bytes_ + bytes > plan_.budget_bytes) return false;
    used_bytes_ += bytes;
    return true;
  }
  catchUp();
  if (outstanding_total_ + bytes > plan_.audit.budget_bytes) {
    if (audit_key) {
      auto it = audited_.find(*audit_key);
      if (it != audited_.end()) takeBack(it->second);
    }
    return false;
  }
  outstanding_bytes_.push_back(bytes);
  outstanding_total_ += bytes;
  ++written_;
  if (audit_key) {
    auto it = audited_.find(*audit_key);
    if (it != audited_.end() && !it->second.by_rotation) ++unpaced_written_;
  }
  return true;
}

void CapturePolicy::addAuditCost(int64_t ns, std::optional<uint64_t> audit_key) {
  std::lock_guard<std::mutex> lock(mu_);
  // The first pass and a new regime's first call are judged whatever they cost: charged to the
  // rotation's budget, a small run's first pass would hold the rotation back for the whole run.
  auto it = audit_key ? audited_.find(*audit_key) : audited_.end();
  if (it == audited_.end() || it->second.by_rotation) audit_cost_ns_ += ns;
}

void CapturePolicy::auditLost() {
  std::lock_guard<std::mutex> lock(mu_);
  ++lost_;
}

CapturePolicy::RotationCounts CapturePolicy::rotationCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace nanprov::probes
