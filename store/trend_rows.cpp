#include "store/trend_rows.h"

#include "store/sqlite_rows.h"
#include "store/trend_keeper.h"

namespace nanprov::store {
namespace {

// More rows than the writer ever keeps (a bucket more than its limit per layer, while it
// coarsens) is a store nanprov did not write.
constexpr int64_t kMostRows = static_cast<int64_t>(TrendKeeper::kLayersKept) * (TrendKeeper::kBucketsPerLayer + 1);

}  // namespace

Status loadTrends(sqlite3* db, const std::string& path, RankInfo* info) {
  if (!sqlite::hasTable(db, "trends") || !sqlite::hasTable(db, "trend_warnings")) return Status::Ok();
  const std::string trends =
      "SELECT layer, step, last_step, bucket_steps, calls, IFNULL(module, ''), logit, IFNULL(logit_source, 'lse'), "
      "IFNULL(scores_dtype, ''), max_o, max_dq, max_dk, max_dv FROM trends ORDER BY layer, step LIMIT " +
      std::to_string(kMostRows + 1);
  NANPROV_RETURN_IF_ERROR(sqlite::eachRowOf(db, path, trends, [&](sqlite3_stmt* s) {
    if (static_cast<int64_t>(info->trends.size()) >= kMostRows) return notAStore(path, "its trends table is too large");
    TrendPoint p;
    std::string source;
    sqlite::readRow(s, 0, p.layer, p.step, p.last_step, p.bucket_steps, p.calls, p.module, p.logit, source,
                    p.scores_dtype, p.o, p.dq, p.dk, p.dv);
    auto parsed = parseLogitSource(source);
    if (!parsed || p.last_step < p.step || p.bucket_steps < 1 || p.calls < 0) {
      return notAStore(path, "a trends row for layer " + std::to_string(p.layer) + " is not one nanprov writes");
    }
    p.source = *parsed;
    info->trends.push_back(std::move(p));
    return Status::Ok();
  }));
  const char* warnings =
      "SELECT layer, IFNULL(module, ''), kind, step, value, from_step, from_value, source, IFNULL(scores_dtype, '') "
      "FROM trend_warnings ORDER BY step, layer LIMIT 8192";
  return sqlite::eachRowOf(db, path, warnings, [&](sqlite3_stmt* s) {
    TrendWarning w;
    std::string kind, source;
    sqlite::readRow(s, 0, w.layer, w.module, kind, w.step, w.value, w.from_step, w.from_value, source, w.scores_dtype);
    auto k = parseTrendKind(kind);
    auto src = parseLogitSource(source);
    if (!k || !src) return notAStore(path, "a trend_warnings row is not one nanprov writes");
    w.kind = *k;
    w.source = *src;
    w.rank = info->rank;
    info->trend_warnings.push_back(std::move(w));
    return Status::Ok();
  });
}

}  // namespace nanprov::store
