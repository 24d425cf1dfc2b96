#include "report/run_overview.h"

#include <algorithm>

#include "report/first_module.h"
#include "store/job.h"
#include "store/meta_values.h"
#include "store/process_notes.h"
#include "store/reader.h"

namespace nanprov::report {

RunOverview runOverviewOf(const store::RunData& run) {
  RunOverview f{.dir = run.dir,
                .dirs = run.dirs,
                .step_unit = run.stepUnit(),
                .calls = run.total_calls,
                .calls_not_stored = run.callsNotStored(),
                .incomplete = run.incompleteStores(),
                .summarised = run.summarised(),
                .damage = run.damage,
                .world_size = run.worldSize(),
                .missing_ranks = run.missingRanks(),
                .unrecorded = run.unrecorded,
                .clocks_differ = run.acrossHosts(),
                .job = store::jobIdOf(run),
                .trail_on = run.trailOn(),
                .trail_missed_compiled_code = trailMissedCompiledCode(run),
                .unchecked = uncheckedAttention(run),
                .suggested_probe_modules = suggestedProbeModules(run),
                .run_file_readable = run.settings.readable,
                .command = run.settings.command,
                .torch = run.settings.torch,
                .exit_code = run.settings.exit_code,
                .signal = run.settings.signal};
  for (const store::RankInfo& r : run.ranks) {
    f.steps = std::max(f.steps, r.steps);
    auto said = [&](const char* key) {
      const std::string* text = store::metaText(r.meta, key);
      return text ? std::optional<std::string>(*text) : std::nullopt;
    };
    f.ranks.push_back({.rank = r.rank,
                       .store = r.path,
                       .steps = r.steps,
                       .calls_stored = r.calls_stored,
                       .meta = r.meta,
                       .device = r.device,
                       .host = said(kMetaHost),
                       .world_size = said("world_size")});
  }
  if (f.ranks.empty()) {
    // No store: the processes' notes say which ranks ran (a run that checked nothing is not "0 ranks").
    const store::ProcessNotes notes = store::readProcessNotes(store::RunDirs(run.dirs));
    f.ranks_without_store = static_cast<int>(notes.ranks.size());
    if (!notes.ranks.empty()) f.world_size = std::max(f.world_size, *notes.ranks.rbegin() + 1);
  }
  return f;
}

std::string stepLabel(StepUnit unit, int64_t step) {
  return (unit == StepUnit::kForwardPass ? "forward pass " : "step ") + std::to_string(step);
}

}  // namespace nanprov::report
