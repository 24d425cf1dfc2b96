#include "store/run_counters_meta.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "base/numbers.h"
#include "store/sqlite_db.h"
#include "store/sqlite_rows.h"

namespace nanprov::store {
namespace {

// The keys, as the probes have always written them (the end-to-end tests and users' queries read them).
constexpr const char* kCallsWritten = "calls_written";
constexpr const char* kDroppedRows = "dropped_rows";
constexpr const char* kStoreBudget = "store_budget";
constexpr const char* kCallsSummarised = "calls_summarised";
constexpr const char* kNotCleanSummarised = "not_clean_summarised";
constexpr const char* kSummaryEvery = "summary_every";
constexpr const char* kStepsThinned = "steps_thinned";
constexpr const char* kStepUnit = "step_unit";
constexpr const char* kTrail = "trail";
constexpr const char* kTrailCompiled = "trail_compiled";
constexpr const char* kTrailCompiledBackward = "trail_compiled_backward";
constexpr const char* kHostSyncs = "host_syncs";
constexpr const char* kCollectivesChecked = "collectives_checked";
constexpr const char* kBackwardInherited = "backward_inherited";
constexpr const char* kKernelsAttributed = "kernels_attributed";
constexpr const char* kCuptiRecords = "cupti_records";
constexpr const char* kCuptiDroppedRecords = "cupti_dropped_records";
constexpr const char* kCuptiDetached = "cupti_detached";
constexpr const char* kDeferredChecks = "deferred_checks";
constexpr const char* kMeasureLaunches = "measure_launches";
constexpr const char* kReleasedTensors = "released_tensors";
constexpr const char* kCaptureHostCopies = "capture_host_copies";
constexpr const char* kAuditRotation = "audit_rotation";
constexpr const char* kSentinelNonfiniteGrads = "sentinel_nonfinite_grads";
constexpr const char* kSentinelNonfiniteParams = "sentinel_nonfinite_params";
constexpr const char* kProbeCost = "probe_cost";
constexpr const char* kKernelTracer = "kernel_tracer";
constexpr const char* kMesh = "mesh";
// Prefixes: the rest of the key is what was counted, a stage, or a module pattern.
constexpr std::string_view kUnprobed = "unprobed:";
constexpr std::string_view kUnprobedStep = "unprobed_step:";
constexpr std::string_view kProbeNs = "probe_ns:";
constexpr std::string_view kModuleClass = "module_class:";
constexpr std::string_view kAuditRegime = "audit_regime:";

// Values of several numbers: the words around them, written and read by the same list.
template <size_t N>
using Words = std::array<std::string_view, N>;
constexpr Words<4> kCuptiRecordsWords = {"kernel ", ", external id ", ", api ", ""};
constexpr Words<3> kReleasedWords = {"", " released, freeing ",
                                     " storages (the caching allocator's frees, moved from autograd)"};
constexpr Words<3> kMeasureLaunchesWords = {"dense ", ", fused ", ""};
constexpr Words<5> kDeferredWords = {"deferred ", ", batched launches ", ", modified before their check ",
                                     ", immediate after a fallback ", ""};
constexpr std::string_view kDeferredOff = "off (NANPROV_DEFER_CHECKS=0)";
constexpr std::string_view kDeferredCuda = "CUDA calls: ";
constexpr std::string_view kDeferredCudaAndCpu = "CUDA and CPU calls: ";
constexpr std::string_view kChecked = "checked", kUnchecked = "unchecked";

constexpr int64_t kMaxCount = INT64_MAX;
// Counts the reader adds up over ranks: far from overflowing a sum over any number of them.
constexpr int64_t kMaxSummed = INT64_MAX / 4;

template <size_t N>
std::string spelled(const Words<N>& words, const std::array<int64_t, N - 1>& numbers) {
  std::string out(words[0]);
  for (size_t i = 0; i + 1 < N; ++i) (out += std::to_string(numbers[i])) += words[i + 1];
  return out;
}

// The numbers of a text spelled from `words`; nullopt unless the whole text is that.
template <size_t N>
std::optional<std::array<int64_t, N - 1>> numbersIn(std::string_view text, const Words<N>& words) {
  std::array<int64_t, N - 1> out{};
  if (!text.starts_with(words[0])) return std::nullopt;
  size_t at = words[0].size();
  for (size_t i = 0; i + 1 < N; ++i) {
    const std::string_view next = words[i + 1];
    size_t end = i + 2 == N ? text.size() - std::min(text.size(), next.size()) : text.find(next, at);
    if (end == std::string_view::npos || end < at || (i + 2 == N && !text.ends_with(next))) return std::nullopt;
    auto n = parseInteger(text.substr(at, end - at), 0, kMaxCount);
    if (!n) return std::nullopt;
    out[i] = *n;
    at = end + next.size();
  }
  return out;
}

const std::string* find(const StoreMeta& meta, const char* key) { return metaText(meta, key); }

std::optional<int64_t> count(const StoreMeta& meta, const char* key, int64_t max = kMaxCount) {
  return metaInteger(meta, key, 0, max);
}

// Each key under `prefix`, without it, with its value.
template <typename Fn>
void eachUnder(const StoreMeta& meta, std::string_view prefix, Fn fn) {
  for (auto it = meta.lower_bound(std::string(prefix)); it != meta.end() && it->first.starts_with(prefix); ++it) {
    fn(it->first.substr(prefix.size()), it->second);
  }
}

std::string under(std::string_view prefix, const std::string& rest) { return std::string(prefix) + rest; }

// An audit regime: "layer phase first_seen last_seen calls last_judged conditions in words".
std::string auditRegimeText(const AuditRegime& r) {
  return std::to_string(r.layer) + " " + phaseName(r.phase) + " " + std::to_string(r.first_seen) + " " +
         std::to_string(r.last_seen) + " " + std::to_string(r.calls) + " " + std::to_string(r.last_judged) + " " +
         r.conditions;
}

// A damaged row reads as none: the report then has one regime fewer to vouch for, never a wrong one.
std::optional<AuditRegime> auditRegimeIn(std::string_view text) {
  std::array<std::string_view, 6> fields;
  for (std::string_view& field : fields) {
    const size_t space = text.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    field = text.substr(0, space);
    text.remove_prefix(space + 1);
  }
  AuditRegime r;
  if (!parsePhase(std::string(fields[1]), &r.phase)) return std::nullopt;
  auto layer = parseInteger(fields[0], 0, kMaxCount);
  auto first = parseInteger(fields[2], 0, kMaxCount), last = parseInteger(fields[3], 0, kMaxCount);
  auto calls = parseInteger(fields[4], 0, kMaxSummed), judged = parseInteger(fields[5], -1, kMaxCount);
  if (!layer || !first || !last || !calls || !judged || *last < *first) return std::nullopt;
  r.layer = *layer, r.first_seen = *first, r.last_seen = *last, r.calls = *calls, r.last_judged = *judged;
  r.conditions = std::string(text);
  return r;
}

std::optional<DeferredChecks> deferredIn(std::string_view text) {
  if (text == kDeferredOff) return DeferredChecks{};
  DeferredChecks d;
  if (text.starts_with(kDeferredCudaAndCpu)) {
    d.mode = DeferMode::kCudaAndCpu;
    text.remove_prefix(kDeferredCudaAndCpu.size());
  } else if (text.starts_with(kDeferredCuda)) {
    d.mode = DeferMode::kCuda;
    text.remove_prefix(kDeferredCuda.size());
  } else {
    return std::nullopt;
  }
  auto n = numbersIn(text, kDeferredWords);
  if (!n) return std::nullopt;
  d.deferred = (*n)[0], d.batched_launches = (*n)[1], d.modified = (*n)[2], d.immediate_fallbacks = (*n)[3];
  return d;
}

// The budget's totals; a count that is there and damaged is said in *unreadable.
std::optional<BudgetSummaries> summariesIn(const StoreMeta& meta, std::string* unreadable) {
  const std::string* calls = find(meta, kCallsSummarised);
  if (!calls) return std::nullopt;
  auto refused = [&](const std::string& why) -> std::optional<BudgetSummaries> {
    if (unreadable) *unreadable = why;
    return std::nullopt;
  };
  BudgetSummaries s;
  auto n = parseInteger(*calls, 0, kMaxSummed);
  if (!n) return refused(std::string("meta.") + kCallsSummarised + " is not a count");
  s.calls = *n;
  s.every = metaInteger(meta, kSummaryEvery, 1, kMaxSummed).value_or(1);
  if (const std::string* thinned = find(meta, kStepsThinned)) {
    auto n = parseInteger(*thinned, 0, kMaxSummed);
    if (!n) return refused(std::string("meta.") + kStepsThinned + " is not a count");
    s.steps_thinned = *n;
  }
  if (const std::string* not_clean = find(meta, kNotCleanSummarised)) {
    auto nc = parseInteger(*not_clean, 0, s.calls);
    if (!nc) return refused(std::string("meta.") + kNotCleanSummarised + " is not a count of the calls summarised");
    s.not_clean = *nc;
  }
  return s;
}

}  // namespace

std::map<std::string, std::string> metaRowsOf(const RunCounters& c) {
  std::map<std::string, std::string> rows;
  auto number = [&](const char* key, const std::optional<int64_t>& n) {
    if (n) rows[key] = std::to_string(*n);
  };
  auto flag = [&](const char* key, bool on) {
    if (on) rows[key] = "1";
  };
  auto text = [&](const char* key, const std::optional<std::string>& t) {
    if (t) rows[key] = *t;
  };
  number(kCallsWritten, c.calls_written);
  number(kDroppedRows, c.dropped_rows);
  number(kStoreBudget, c.store_budget);
  if (const auto& s = c.summarised) {
    rows[kCallsSummarised] = std::to_string(s->calls);
    rows[kNotCleanSummarised] = std::to_string(s->not_clean);
    rows[kSummaryEvery] = std::to_string(s->every);
    rows[kStepsThinned] = std::to_string(s->steps_thinned);
  }
  if (c.step_unit) rows[kStepUnit] = stepUnitName(*c.step_unit);
  flag(kTrail, c.trail);
  flag(kTrailCompiled, c.trail_compiled);
  if (c.trail_compiled_backward != CompiledBackward::kNotCompiled) {
    rows[kTrailCompiledBackward] = c.trail_compiled_backward == CompiledBackward::kChecked ? kChecked : kUnchecked;
  }
  number(kHostSyncs, c.host_syncs);
  number(kCollectivesChecked, c.collectives_checked);
  number(kBackwardInherited, c.backward_inherited);
  number(kKernelsAttributed, c.kernels_attributed);
  if (const auto& r = c.cupti_records)
    rows[kCuptiRecords] = spelled(kCuptiRecordsWords, {r->kernel, r->external_id, r->api});
  number(kCuptiDroppedRecords, c.cupti_dropped_records);
  flag(kCuptiDetached, c.cupti_detached);
  if (const auto& d = c.deferred_checks) {
    rows[kDeferredChecks] =
        d->mode == DeferMode::kOff
            ? std::string(kDeferredOff)
            : std::string(d->mode == DeferMode::kCudaAndCpu ? kDeferredCudaAndCpu : kDeferredCuda) +
                  spelled(kDeferredWords, {d->deferred, d->batched_launches, d->modified, d->immediate_fallbacks});
  }
  if (const auto& m = c.measure_launches) rows[kMeasureLaunches] = spelled(kMeasureLaunchesWords, {m->dense, m->fused});
  if (const auto& r = c.released_tensors) rows[kReleasedTensors] = spelled(kReleasedWords, {r->released, r->storages});
  number(kCaptureHostCopies, c.capture_host_copies);
  if (const auto& a = c.audit_rotation) {
    rows[kAuditRotation] =
        std::to_string(a->rotations) + " " + std::to_string(a->held_back) + " " + std::to_string(a->regime_changes);
  }
  number(kSentinelNonfiniteGrads, c.sentinel_nonfinite_grads);
  number(kSentinelNonfiniteParams, c.sentinel_nonfinite_params);
  for (const auto& [what, n] : c.unprobed) rows[under(kUnprobed, what)] = std::to_string(n);
  for (const auto& [what, step] : c.unprobed_first_step) rows[under(kUnprobedStep, what)] = std::to_string(step);
  for (const auto& [stage, ns] : c.probe_ns) rows[under(kProbeNs, stage)] = std::to_string(ns);
  text(kProbeCost, c.probe_cost);
  text(kKernelTracer, c.kernel_tracer);
  text(kMesh, c.mesh);
  for (const auto& [pattern, cls] : c.module_class) rows[under(kModuleClass, pattern)] = cls;
  for (const auto& [slot, r] : c.audit_regimes) rows[under(kAuditRegime, slot)] = auditRegimeText(r);
  return rows;
}

Status writeCounters(sqlite3* db, const RunCounters& counters) {
  NANPROV_ASSIGN_OR_RETURN(sqlite::Stmt insert,
                           sqlite::prepare(db, "INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)"));
  for (const auto& [key, value] : metaRowsOf(counters)) {
    sqlite::bindRow(insert.get(), key, value);
    const int rc = sqlite3_step(insert.get());
    sqlite3_reset(insert.get());
    if (rc != SQLITE_DONE) return Status::Error(sqlite::errorOf(db));
  }
  return Status::Ok();
}

RunCounters runCountersOf(const StoreMeta& meta, std::string* unreadable) {
  RunCounters c;
  c.calls_written = count(meta, kCallsWritten);
  c.dropped_rows = count(meta, kDroppedRows, kMaxSummed);
  c.store_budget = count(meta, kStoreBudget);
  c.summarised = summariesIn(meta, unreadable);
  if (const std::string* unit = find(meta, kStepUnit)) {
    for (StepUnit u : {StepUnit::kOptimizerStep, StepUnit::kForwardPass}) {
      if (*unit == stepUnitName(u)) c.step_unit = u;
    }
  }
  // Flags are said by their row being there (their text is "1"), as the readers always took them.
  c.trail = find(meta, kTrail) != nullptr;
  c.trail_compiled = find(meta, kTrailCompiled) != nullptr;
  c.cupti_detached = find(meta, kCuptiDetached) != nullptr;
  if (const std::string* backward = find(meta, kTrailCompiledBackward)) {
    if (*backward == kChecked) c.trail_compiled_backward = CompiledBackward::kChecked;
    if (*backward == kUnchecked) c.trail_compiled_backward = CompiledBackward::kUnchecked;
  }
  c.host_syncs = count(meta, kHostSyncs);
  c.collectives_checked = count(meta, kCollectivesChecked);
  c.backward_inherited = count(meta, kBackwardInherited);
  c.kernels_attributed = count(meta, kKernelsAttributed);
  if (const std::string* t = find(meta, kCuptiRecords)) {
    if (auto n = numbersIn(*t, kCuptiRecordsWords)) c.cupti_records = CuptiRecords{(*n)[0], (*n)[1], (*n)[2]};
  }
  c.cupti_dropped_records = count(meta, kCuptiDroppedRecords);
  if (const std::string* t = find(meta, kDeferredChecks)) c.deferred_checks = deferredIn(*t);
  if (const std::string* t = find(meta, kMeasureLaunches)) {
    if (auto n = numbersIn(*t, kMeasureLaunchesWords)) c.measure_launches = MeasureLaunches{(*n)[0], (*n)[1]};
  }
  if (const std::string* t = find(meta, kReleasedTensors)) {
    if (auto n = numbersIn(*t, kReleasedWords)) c.released_tensors = ReleasedTensors{(*n)[0], (*n)[1]};
  }
  c.capture_host_copies = count(meta, kCaptureHostCopies);
  if (const std::string* t = find(meta, kAuditRotation)) {
    // "rotations held_back regime_changes" (the last since issue 63): each read on its own, a
    // damaged one as none.
    AuditRotation& a = c.audit_rotation.emplace();
    std::string_view rest = *t;
    for (int64_t* field : {&a.rotations, &a.held_back, &a.regime_changes}) {
      const size_t space = rest.find(' ');
      *field = parseInteger(rest.substr(0, space), 0, kMaxCount).value_or(0);
      if (space == std::string_view::npos) break;
      rest.remove_prefix(space + 1);
    }
  }
  c.sentinel_nonfinite_grads = count(meta, kSentinelNonfiniteGrads);
  c.sentinel_nonfinite_params = count(meta, kSentinelNonfiniteParams);
  // An unreadable count or step reads as 0, and its kind is still named: it ran unchecked.
  eachUnder(meta, kUnprobed, [&](const std::string& what, const std::string& n) {
    c.unprobed[what] = parseInteger(n, 0, kMaxSummed).value_or(0);
  });
  eachUnder(meta, kUnprobedStep, [&](const std::string& what, const std::string& step) {
    c.unprobed_first_step[what] = parseInteger(step, 0, kMaxCount).value_or(0);
  });
  eachUnder(meta, kProbeNs, [&](const std::string& stage, const std::string& ns) {
    if (auto n = parseInteger(ns, 0, kMaxCount)) c.probe_ns[stage] = *n;
  });
  if (const std::string* t = find(meta, kProbeCost)) c.probe_cost = *t;
  if (const std::string* t = find(meta, kKernelTracer)) c.kernel_tracer = *t;
  if (const std::string* t = find(meta, kMesh)) c.mesh = *t;
  eachUnder(meta, kModuleClass,
            [&](const std::string& pattern, const std::string& cls) { c.module_class[pattern] = cls; });
  eachUnder(meta, kAuditRegime, [&](const std::string& slot, const std::string& text) {
    if (auto r = auditRegimeIn(text)) c.audit_regimes[slot] = std::move(*r);
  });
  return c;
}

}  // namespace nanprov::store
