// What the report says of the run as a whole, worked out once from its stores: its size, how far
// it was checked, its ranks and directories, the attention it could not check, and how the
// training ended. Part of the report's model (report/report.h); texts are kept as stored.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "base/records/device_identity.h"
#include "base/records/summarised.h"
#include "report/unchecked_attention.h"

namespace nanprov::store {
struct RunData;
}  // namespace nanprov::store

namespace nanprov::report {

struct RankOverview {
  int rank = 0;
  std::string store;                        // its store file
  int64_t steps = 0;                        // step boundaries recorded
  int64_t calls_stored = 0;                 // call rows the store holds
  std::map<std::string, std::string> meta;  // the store's meta table, for the JSON (values as stored)
  DeviceIdentity device;                    // its host and GPU, as the probes described them
  // Its meta's host and world size, as stored (the page's ranks table); nullopt where it has none.
  std::optional<std::string> host, world_size;
};

struct RunOverview {
  std::string dir;                // the first directory given: the run's name in what is printed
  std::vector<std::string> dirs;  // every directory of the job (one per node)
  StepUnit step_unit = StepUnit::kOptimizerStep;
  int64_t calls = 0;             // checked calls over all ranks, loaded or not
  int64_t steps = 0;             // the most step boundaries a rank recorded
  int64_t calls_not_stored = 0;  // begun by the probes, never committed (the process was killed, or writes failed)
  // Each rank whose store's writes failed (a full disk): "rank 0: the store is incomplete from step 12: the disk
  // filled".
  std::vector<std::string> incomplete;
  Summarised summarised;
  std::vector<std::string> damage;  // what in the run's files contradicts itself, a line each
  std::vector<RankOverview> ranks;
  // Where no store was read (nothing checked leaves none): how many ranks the instrumented
  // processes' notes name (store/process_notes.h).
  int ranks_without_store = 0;
  // The ranks that ran: those whose store was read, else those the processes' notes name.
  int ranksRan() const { return ranks.empty() ? ranks_without_store : static_cast<int>(ranks.size()); }
  // The job: its world size (at least the ranks that ran), the ranks with no store read, those whose workers could not
  // write one (→ why), whether clocks of several hosts order its calls, and its id ("" when none).
  int world_size = 0;
  std::vector<int> missing_ranks;
  std::map<int, std::string> unrecorded;
  bool clocks_differ = false;
  std::string job;
  bool trail_on = false;                      // --trail
  bool trail_missed_compiled_code = false;    // --trail beside torch.compile'd code, whose backward it cannot check
  std::vector<UncheckedAttention> unchecked;  // attention recognised and not checked
  std::vector<std::string> suggested_probe_modules;  // the --probe-module that would check it
  // run.json: what `nanprov run` ran, the torch it was built against, and how the training ended.
  bool run_file_readable = false;
  std::vector<std::string> command;
  std::string torch;
  std::optional<int> exit_code;
  std::optional<std::string> signal;
};

RunOverview runOverviewOf(const store::RunData& run);

// "step 3" or, for inference runs, "forward pass 3".
std::string stepLabel(StepUnit unit, int64_t step);

}  // namespace nanprov::report
