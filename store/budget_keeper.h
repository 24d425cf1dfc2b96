// Private to store/: keeps one rank store under its byte budget (nanprov run --store-budget) for
// any run length. Runs on the writer thread only, at step boundaries after the step's batch has
// committed, and after each chunk of a batch larger than the budget holds (chunkCalls): the
// training never waits on it.
//
// What stays in full: the first steps, the newest steps (a ring), the first steps that held a call
// that was not clean (the edge and how it spread) and the step before each, and every call with a
// capture or traced kernels. The calls of every other step become one `step_summaries` row per
// (step, layer, phase): the call count, how many were not clean, and the largest |x| per role. When
// the summaries outgrow their share, neighbouring steps merge (every k steps, k doubling), so the
// counts and maxima stay exact while the detail coarsens.
#pragma once

#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/records/role.h"
#include "base/status.h"
#include "store/sqlite_db.h"

namespace nanprov::store {

// How a budget splits, as fractions of what the empty schema (about 80 KiB) leaves. The rest is
// for the calls that are not clean, kernels, captures and the steps table.
struct BudgetShares {
  double first_steps = 0.10;
  double ring = 0.35;
  double summaries = 0.15;
  double wal = 0.10;
  // Past this share of live bytes (pages in use plus the WAL), the ring shrinks by a quarter.
  double high_water = 0.70;
};

class BudgetKeeper {
 public:
  // `budget_bytes` 0: no budget, nothing is ever pruned.
  BudgetKeeper(std::string path, int64_t budget_bytes);

  bool on() const { return budget_ > 0; }
  // Bounds the WAL on the writer's connection, so it never outgrows its share.
  Status configure(sqlite3* db);
  // Every call row the writer wrote (in seq order within a batch), with the tensor rows it has (a
  // call that was not clean has one per tensor; a clean call none).
  void noteCall(int64_t seq, int64_t step, int64_t tensor_rows);
  // After a batch with a step boundary (or a chunk of a large batch) committed: summarises the
  // full steps the budget no longer holds and thins the summaries, in one transaction.
  Status stepEnded(sqlite3* db);
  // The most calls one transaction may write, each weighed as a call not clean with its tensor
  // rows: a writer behind by many thousands of calls (a burst, a bench) would otherwise commit
  // more than the budget holds before pruning saw any of it, and the file keeps its largest size.
  int64_t chunkCalls() const;

 private:
  struct StepSpan {
    int64_t first_seq = 0, last_seq = 0;
    int64_t calls = 0;  // in clean calls' rows: a call that was not clean counts its tensor rows too
  };
  struct Summary {
    int64_t calls = 0, first_seq = 0, last_seq = 0;
    int64_t not_clean = 0;  // of `calls`
    std::array<double, kRoleCount> max_abs{};
    std::array<bool, kRoleCount> seen{};
  };

  Status prune(sqlite3* db);
  Status summarise(sqlite3* db, int64_t step, const StepSpan& span);
  Status summariseWithTensorRows(sqlite3* db, int64_t step, const StepSpan& span,
                                 std::map<std::pair<int64_t, std::string>, Summary>* rows);
  StatusOr<bool> keptForAnEdge(sqlite3* db, int64_t step);
  StatusOr<const std::vector<Role>*> rolesOf(sqlite3* db, int64_t sig);
  Status thin(sqlite3* db);
  int64_t liveBytes(sqlite3* db) const;
  int64_t share(double fraction) const;  // bytes of the budget past the empty schema
  int64_t walBytes() const;

  std::string path_;
  int64_t budget_;
  BudgetShares shares_;
  std::map<int64_t, StepSpan> full_;  // steps whose clean rows are all still held, oldest first
  bool first_steps_done_ = false;
  int64_t first_calls_ = 0;
  int64_t ring_calls_limit_ = 0;
  int64_t shrunk_at_step_ = -1;  // the newest step when the ring last shrank
  int64_t summary_rows_ = 0;
  int64_t summarised_calls_ = 0;                // meta calls_summarised, committed with the rows
  int64_t summarised_not_clean_ = 0;            // meta not_clean_summarised: of those, not clean
  int64_t steps_thinned_ = 0;                   // meta steps_thinned
  int64_t every_ = 1;                           // steps one summary row may stand for
  int64_t bucket_start_ = -1;                   // the step of the newest summary bucket, which later steps join
  std::map<int64_t, std::vector<Role>> roles_;  // signature id → role of each max |x|
  sqlite::Stmt select_, upsert_, erase_;
  sqlite::Stmt select_detailed_, erase_detailed_tensors_, erase_detailed_;
  std::set<int64_t> edge_steps_;  // the first steps that held a call that was not clean
};

}  // namespace nanprov::store
