#include "store/derived_tables.h"

#include <optional>

#include "store/rank_store.h"
#include "store/run_counters_meta.h"
#include "store/sqlite_db.h"
#include "store/sqlite_rows.h"

namespace nanprov::store {
namespace {

// One row of integers (NULL read as 0), or nullopt when the query cannot run (an older store).
std::optional<std::vector<int64_t>> integers(sqlite3* db, const std::string& sql, int columns) {
  auto st = sqlite::prepare(db, sql);
  if (!st.ok() || sqlite3_step(st->get()) != SQLITE_ROW) return std::nullopt;
  std::vector<int64_t> out;
  for (int i = 0; i < columns; ++i) out.push_back(sqlite3_column_int64(st->get(), i));
  return out;
}

std::string n(int64_t v) { return std::to_string(v); }

// A read transaction: every statement in it sees the same commit of a live run's writer.
struct Snapshot {
  explicit Snapshot(sqlite3* db) : db(db) { open = sqlite::exec(db, "BEGIN").ok(); }
  ~Snapshot() {
    if (open) sqlite::exec(db, "COMMIT").ignore();  // a read transaction: nothing to keep or lose
  }
  sqlite3* db;
  bool open = false;
};

}  // namespace

std::vector<std::string> derivedTableDisagreements(sqlite3* db, const RankInfo& info) {
  std::vector<std::string> out;
  const std::string who = "rank " + n(info.rank) + "'s ";
  Snapshot snapshot(db);
  // The meta as of this snapshot: the counts below are compared with what it says now.
  StoreMeta meta;
  if (auto st = sqlite::prepare(db, "SELECT key, value FROM meta"); st.ok()) {
    while (sqlite3_step(st->get()) == SQLITE_ROW) meta[columnText(st->get(), 0)] = columnText(st->get(), 1);
  }
  std::string unreadable;
  const RunCounters counters = runCountersOf(meta, &unreadable);
  if (!unreadable.empty()) return out;  // refused on its own (RankInfo::counters_unreadable)
  const BudgetSummaries sums = counters.summarised.value_or(BudgetSummaries{});
  const bool failed = info.write_failure.has_value();  // a failed batch leaves its trend counts behind

  // The steps: rows and the thinned count stand for steps 0..N-1; the newest call ran in step N at most.
  auto steps = integers(db, "SELECT COUNT(*), IFNULL(MIN(step), 0), IFNULL(MAX(step), -1) FROM steps", 3);
  auto newest = integers(db, "SELECT IFNULL((SELECT step FROM calls ORDER BY seq DESC LIMIT 1), 0)", 1);
  int64_t recorded = 0;
  if (steps) {
    const int64_t rows = (*steps)[0], first = (*steps)[1], last = (*steps)[2];
    recorded = rows + sums.steps_thinned;
    // Steps are counted from 0 and end one at a time: each has its row, or was thinned.
    if (first < 0 || (rows > 0 && !failed && recorded != last + 1)) {
      out.push_back(who + "steps table holds " + n(rows) + " rows and meta.steps_thinned " + n(sums.steps_thinned) +
                    " more, for steps " + n(first) + " to " + n(last) + ": they do not count those steps once each");
    }
    if (newest && !failed && (*newest)[0] > recorded) {
      out.push_back(who + "newest call ran in step " + n((*newest)[0]) +
                    ", but its steps table and meta.steps_thinned record " + n(recorded) +
                    " steps: step rows were removed");
    }
  }

  // The budget's summaries against its meta counts, and each row against what a summary can be.
  if (sqlite::hasTable(db, "step_summaries")) {
    auto s = integers(
        db,
        "SELECT COUNT(*), IFNULL(SUM(calls), 0), IFNULL(SUM(not_clean), 0), IFNULL(SUM(calls < 1 OR not_clean < 0 OR "
        "not_clean > calls OR first_seq > last_seq OR last_step < step OR step < 0), 0), "
        "IFNULL(MAX(last_step - step + 1), 0), IFNULL(MAX(last_step), -1) FROM step_summaries",
        6);
    if (s) {
      const int64_t rows = (*s)[0], calls = (*s)[1], not_clean = (*s)[2], bad = (*s)[3], span = (*s)[4], last = (*s)[5];
      if (calls != sums.calls) {
        out.push_back(who + "step_summaries count " + n(calls) + " calls, but its meta says " + n(sums.calls) +
                      " were summarised");
      }
      if (not_clean != sums.not_clean) {
        out.push_back(who + "step_summaries count " + n(not_clean) + " calls not clean, but its meta says " +
                      n(sums.not_clean));
      }
      if (bad > 0) {
        out.push_back(who + "step_summaries hold " + n(bad) +
                      " rows no summary can be (fewer than 1 call, more not clean "
                      "than calls, or a range that ends before it starts)");
      }
      if (sums.every < 1 || (sums.every & (sums.every - 1)) != 0) {
        out.push_back(who + "meta.summary_every " + n(sums.every) +
                      " is not a power of two, as the summaries' thinning makes it");
      } else if (span > sums.every) {
        out.push_back(who + "step_summaries hold a row of " + n(span) + " steps, more than meta.summary_every " +
                      n(sums.every));
      }
      if (rows > 0 && steps && !failed && last >= recorded) {
        out.push_back(who + "step_summaries reach step " + n(last) + ", past the " + n(recorded) +
                      " steps it recorded");
      }
    }
  }

  // The trends: fed by the calls written, and each summarised call's maxima are within its
  // layer's trend over those steps (a trend sees every call of its layer).
  if (sqlite::hasTable(db, "trends") && counters.calls_written && !failed) {
    auto t = integers(db,
                      "SELECT COUNT(*), IFNULL(SUM(calls), 0), IFNULL(SUM(bucket_steps < 1 OR (bucket_steps & "
                      "(bucket_steps - 1)) != 0 "
                      "OR step % bucket_steps != 0 OR last_step < step OR last_step >= step + bucket_steps OR calls < "
                      "0), 0) FROM trends",
                      3);
    if (t && (*t)[0] > 0) {
      // Fewer is legal: a call of no layer (an unlinked backward), or of a layer past those kept, feeds none.
      if ((*t)[1] > *counters.calls_written) {
        out.push_back(who + "trends count " + n((*t)[1]) + " calls, but its writer wrote " +
                      n(*counters.calls_written));
      }
      if ((*t)[2] > 0) out.push_back(who + "trends hold " + n((*t)[2]) + " rows no trend bucket can be");
      if (sqlite::hasTable(db, "step_summaries")) {
        // A forward's O and a backward's dQ, dK, dV, as the trend keeps them (float32 values stored as doubles).
        // A layer past those the trend keeps has no rows, and is not compared.
        auto above = integers(
            db,
            "SELECT COUNT(*) FROM step_summaries s WHERE EXISTS (SELECT 1 FROM (SELECT s.max_o AS mine, 'o' AS col "
            "UNION ALL "
            "SELECT s.max_dq, 'dq' UNION ALL SELECT s.max_dk, 'dk' UNION ALL SELECT s.max_dv, 'dv') m WHERE m.mine > "
            "(SELECT MAX(CASE m.col WHEN 'o' THEN t.max_o WHEN 'dq' THEN t.max_dq WHEN 'dk' THEN t.max_dk ELSE "
            "t.max_dv END) "
            "FROM trends t WHERE t.layer = s.layer AND t.step <= s.last_step AND t.step + t.bucket_steps > s.step) * "
            "(1 + 1e-6))",
            1);
        if (above && (*above)[0] > 0) {
          out.push_back(who + "step_summaries hold " + n((*above)[0]) +
                        " rows whose largest |x| is beyond their layer's trend "
                        "over the same steps");
        }
      }
    }
  }
  return out;
}

}  // namespace nanprov::store
