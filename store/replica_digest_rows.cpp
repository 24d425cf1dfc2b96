#include "store/replica_digest_rows.h"

#include <sqlite3.h>

#include <map>

#include "store/sqlite_db.h"
#include "store/sqlite_rows.h"

namespace nanprov::store {

bool isLandmarkStep(int64_t step) { return step < 16 || (step & (step - 1)) == 0; }

std::vector<ReplicaDigestRecord> withModelDigests(const std::vector<ReplicaDigestRecord>& digests) {
  struct Whole {
    uint64_t sum = 0, place = 0;
    int rank = 0;
  };
  std::map<int64_t, Whole> by_step;
  for (const ReplicaDigestRecord& d : digests) {
    Whole& w = by_step[d.step];
    w.rank = d.rank;
    w.sum += static_cast<uint64_t>(d.digest) * (2 * w.place++ + 1);  // odd weights: no change cancels to 0
  }
  std::vector<ReplicaDigestRecord> out;
  out.reserve(digests.size() + by_step.size());
  for (const auto& [step, w] : by_step) {
    out.push_back({.rank = w.rank, .step = step, .parameter = "", .digest = static_cast<int64_t>(w.sum)});
  }
  out.insert(out.end(), digests.begin(), digests.end());
  return out;
}

Status pruneParameterDigests(sqlite3* db, int64_t newest) {
  NANPROV_ASSIGN_OR_RETURN(
      sqlite::Stmt prune,
      sqlite::prepare(db,
                      "DELETE FROM replica_digests WHERE parameter <> '' AND step < ? AND step >= 16 AND "
                      "(step & (step - 1)) <> 0"));
  sqlite::bindRow(prune.get(), newest - kNewestParameterSteps + 1);
  if (sqlite3_step(prune.get()) != SQLITE_DONE) return Status::Error(sqlite::errorOf(db));
  return Status::Ok();
}

}  // namespace nanprov::store
