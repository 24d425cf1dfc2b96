#include "report/outcome.h"

#include <filesystem>
#include <tuple>

#include "report/unchecked_attention.h"
#include "store/process_notes.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

// Why a run recorded no attention call, from what `nanprov run` and the bootstrap left.
std::string whyNothingChecked(const store::RunData& run, const std::map<std::string, int64_t>& unprobed) {
  namespace fs = std::filesystem;
  if (!unprobed.empty()) {
    return "every attention call the training made is of a kind nanprov does not check yet (listed below)";
  }
  // A process that could not write its store said why beside it: that, not what it ran, is why.
  if (!run.unrecorded.empty()) {
    const auto& [rank, why] = *run.unrecorded.begin();
    return "rank " + std::to_string(rank) + " could not write its store, so none of its calls was recorded (" + why +
           ")";
  }
  const store::RunFile& settings = run.settings;
  if (settings.readable) {
    // `nanprov run` writes the exit status when the training has ended.
    if (!settings.ended()) {
      return "the run is still going: no attention call has reached the store yet (the first is stored by the "
             "end of the first step); ask again in a moment";
    }
    // The tally outlives the process: whether attention ran before it ended, or not at all.
    const int64_t begun = run.callsNotStored();
    const std::string when =
        begun ? " after " + std::to_string(begun) + " attention calls began, before any reached the store"
              : " before any attention call";
    if (settings.signal) return "the training was killed by " + *settings.signal + when;
    if (settings.exit_code && *settings.exit_code != 0) {
      return "the training exited with code " + std::to_string(*settings.exit_code) + when;
    }
  }
  store::ProcessNotes notes = store::readProcessNotes(store::RunDirs(run.dirs));
  if (notes.processes > 0 && notes.instrumented == 0) {
    return "no process was instrumented (see " + (fs::path(run.dir) / "processes").string() + ")";
  }
  if (notes.processes == 0) return "no Python process imported torch";
  return "the model ran no attention op nanprov recognises (SDPA and its backends); "
         "if its attention is hand-written or a library's module, name it with nanprov run --probe-module CLASS";
}

}  // namespace

const char* const kUnseenAttentionHint =
    "if the model has attention nanprov did not recognise, nanprov run --probe-module PATTERN checks it "
    "(its module's class, or a path glob such as 'layers.*.attn')";

std::optional<SentinelFinding> earliestSentinel(const store::RunData& run,
                                                const std::set<std::pair<int, int64_t>>& received) {
  std::optional<SentinelFinding> best;
  auto order = [&](int rank, int64_t step) { return std::make_tuple(step, received.count({rank, step}) > 0, rank); };
  for (const SentinelRecord& f : run.sentinel) {
    if (best && order(f.rank, f.step) > order(best->rank, best->step)) continue;
    if (!best || f.step != best->step || f.rank != best->rank) best = SentinelFinding{f.rank, f.step, {}, {}};
    (f.tensor == SentinelTensor::kGrad ? best->gradients : best->values).push_back(f.parameter);
  }
  return best;
}

const char* outcomeName(Outcome o) {
  switch (o) {
    case Outcome::kClean: return "clean";
    case Outcome::kPartial: return "partial";
    case Outcome::kUnattributed: return "unattributed";
    case Outcome::kEdgeFound: return "edge";
    case Outcome::kOutsideAttention: return "outside_attention";
    case Outcome::kNothingChecked: return "nothing_checked";
    case Outcome::kAuditFinding: return "audit_finding";
    case Outcome::kReplicaDivergence: return "replica_divergence";
  }
  return "clean";
}

bool outcomeIsFault(Outcome o) {
  return o == Outcome::kUnattributed || o == Outcome::kEdgeFound || o == Outcome::kOutsideAttention ||
         o == Outcome::kAuditFinding || o == Outcome::kReplicaDivergence;
}

namespace {

// The kinds of attention that ran unchecked by `step` (the probes' words, without the suggestion).
std::vector<std::string> uncheckedBy(const store::RunData& run, int64_t step) {
  std::vector<std::string> out;
  const std::map<std::string, int64_t> first_steps = run.unprobedFirstSteps();
  for (const UncheckedAttention& u : uncheckedAttention(run)) {
    auto it = first_steps.find(u.what);
    if (it == first_steps.end() || it->second <= step) out.push_back(u.kind);
  }
  return out;
}

}  // namespace

Conclusion conclude(const store::RunData& run, const Findings& findings, const std::optional<FirstModule>& first) {
  const ModuleCheckRecord* first_module = first ? &first->check : nullptr;
  Conclusion c;
  c.collective_paths = collectivePaths(run);
  c.sentinel = earliestSentinel(run, receivedThroughCollective(c.collective_paths));
  c.unprobed = run.unprobed();
  c.made_in_unchecked_attention =
      first_module && first_module->inputsFinite() && isUncheckedAttention(run, *first_module);
  // --trail's answer, when it is not that attention: the module that made them from finite inputs,
  // or the first that received them from outside any module (the batch, the loss).
  const bool named_outside =
      first_module && !c.made_in_unchecked_attention &&
      (first_module->inputs == ModuleInputs::kFinite || first_module->inputs == ModuleInputs::kNonFinite);
  if (c.sentinel && (!findings.first || c.sentinel->step < run.calls[*findings.first].step)) {
    c.sentinel_first = true;
    c.unchecked_by_sentinel_step = uncheckedBy(run, c.sentinel->step);
    // A rank not read may have made them in its attention (and sent them in a collective).
    for (int rank : run.missingRanks()) {
      c.unchecked_by_sentinel_step.push_back("the attention of rank " + std::to_string(rank) +
                                             " (its store was not read)");
    }
    // With no attention call checked, "outside attention" would rest on nothing: attention nanprov
    // does not recognise may have run and made them, whatever --trail named.
    const bool unchecked = (!c.unchecked_by_sentinel_step.empty() && !named_outside) || c.made_in_unchecked_attention ||
                           run.total_calls == 0;
    c.outcome = unchecked ? Outcome::kUnattributed : Outcome::kOutsideAttention;
  } else if (findings.first) {
    c.outcome = Outcome::kEdgeFound;
    // Values that reached attention from upstream, while attention ran unchecked before it: that
    // attention may have made them, unless --trail named the module outside it that did.
    if (findings.origin == Origin::kUpstream) {
      c.unchecked_by_edge_step = uncheckedBy(run, run.calls[*findings.first].step);
      if ((!c.unchecked_by_edge_step.empty() && !named_outside) || c.made_in_unchecked_attention) {
        c.outcome = Outcome::kUnattributed;
      }
    }
  } else if (run.total_calls == 0) {
    c.outcome = Outcome::kNothingChecked;
    c.nothing_checked_why = whyNothingChecked(run, c.unprobed);
  } else if (!c.unprobed.empty() || !run.missingRanks().empty() || run.callsNotStored() > 0 ||
             !run.incompleteStores().empty() || !run.damage.empty()) {
    // Attention unchecked, ranks of the job not read, calls checked that no store holds (the
    // process was killed, or its writes failed), or a store that contradicts itself: what was
    // not stored, or cannot be trusted, was never read here as clean.
    c.outcome = Outcome::kPartial;
  }
  // A process saw a non-finite value earlier than anything stored shows (or nothing stored shows
  // one): its rows were lost, and with them what made it. Never clean or partial, and never an
  // attribution to what was stored later: values went non-finite first where no row tells.
  if (auto seen = run.earliestNonFiniteTallied()) {
    const int64_t step = seen->first;
    const bool before_edge = !findings.first || step < run.calls[*findings.first].step;
    const bool before_sentinel = !c.sentinel || step < c.sentinel->step;
    if (before_edge && before_sentinel) {
      c.outcome = Outcome::kUnattributed;
      c.nonfinite_not_stored = Conclusion::Unstored{.rank = seen->second, .step = step};
      c.sentinel_first = false;
      c.nothing_checked_why.clear();
    }
  }
  c.audit = readAudit(run);
  // Replicas that diverged while every value stayed finite: a fault, never clean. Beside a
  // non-finite value it is listed, and the non-finite value is the answer.
  c.replicas = checkReplicas(run);
  if ((c.outcome == Outcome::kClean || c.outcome == Outcome::kPartial) && c.replicas.first_divergence) {
    c.outcome = Outcome::kReplicaDivergence;
  }
  if ((c.outcome == Outcome::kClean || c.outcome == Outcome::kPartial) && !c.audit.findings.empty()) {
    c.outcome = Outcome::kAuditFinding;
  }
  // The audit vouches only for what it judged: conditions its calls met and it never judged (a
  // mask band that appeared, rows that lost every key) leave the run partial, never plainly clean.
  if (c.outcome == Outcome::kClean && c.audit.coverage.regimes_judged < c.audit.coverage.regimes_seen) {
    c.outcome = Outcome::kPartial;
  }
  return c;
}

}  // namespace nanprov::report
