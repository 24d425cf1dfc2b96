#include "store/trend_keeper.h"

#include <algorithm>
#include <utility>

#include "store/sqlite_rows.h"

namespace nanprov::store {
namespace {

// -1 where the call holds no finite value of `role`.
double largestOf(const CallRecord& call, Role role) {
  for (const TensorHealth& t : call.tensors) {
    if (t.role == role && t.numel > t.nonfinite()) return t.max_abs;
  }
  return -1;
}

// -1 (none seen) as NULL.
std::optional<double> seen(double v) { return v < 0 ? std::nullopt : std::optional<double>(v); }

}  // namespace

void TrendKeeper::Bucket::merge(const Bucket& other) {
  first_step = std::min(first_step, other.first_step);
  last_step = std::max(last_step, other.last_step);
  calls += other.calls;
  if (other.logit > logit) {
    logit = other.logit;
    source = other.source;
    scores_dtype = other.scores_dtype;
  }
  o = std::max(o, other.o);
  dq = std::max(dq, other.dq);
  dk = std::max(dk, other.dk);
  dv = std::max(dv, other.dv);
  dirty = true;
}

TrendKeeper::Bucket& TrendKeeper::bucketOf(Layer& layer, int64_t step) {
  const int64_t index = step >> shift_;
  auto& b = layer.buckets;
  // Calls come in step order but for deferred checks and backward calls of the step before.
  auto it = std::lower_bound(b.begin(), b.end(), index, [](const Bucket& x, int64_t i) { return x.index < i; });
  if (it == b.end() || it->index != index) {
    Bucket fresh;
    fresh.index = index;
    fresh.first_step = fresh.last_step = step;
    it = b.insert(it, fresh);
  }
  return *it;
}

// A layer outgrew its buckets: every layer's pairs merge, so all keep one alignment and the
// report can merge ranks bucket by bucket.
void TrendKeeper::coarsen() {
  ++shift_;
  for (auto& [id, layer] : layers_) {
    std::vector<Bucket> merged;
    for (Bucket& b : layer.buckets) {
      b.index >>= 1;
      if (!merged.empty() && merged.back().index == b.index) merged.back().merge(b);
      else merged.push_back(b);
    }
    layer.buckets = std::move(merged);
  }
  rewrite_ = true;
}

std::vector<TrendWarning> TrendKeeper::noteCall(const CallRecord& call) {
  if (call.layer < 0 || (layers_.size() >= kLayersKept && !layers_.count(call.layer))) return {};
  Layer& layer = layers_[call.layer];
  if (layer.module.empty()) layer.module = call.module;
  Bucket& b = bucketOf(layer, call.step);
  b.first_step = std::min(b.first_step, call.step);
  b.last_step = std::max(b.last_step, call.step);
  ++b.calls;
  b.dirty = true;
  std::vector<TrendWarning> warnings;
  if (std::optional<CallLogit> logit = callLogit(call)) {
    if (logit->value > b.logit) {
      b.logit = logit->value;
      b.source = logit->source;
      b.scores_dtype = logit->scores_dtype;
    }
    warnings = layer.watch.observe(call.step, *logit);
    for (TrendWarning& w : warnings) {
      w.rank = call.rank;
      w.layer = call.layer;
      w.module = layer.module;
      w.nonfinite_step = nonfinite_step_;
      if (!first_warning_ && !nonfinite_step_) first_warning_ = w;
    }
  }
  b.o = std::max(b.o, largestOf(call, Role::kO));
  b.dq = std::max(b.dq, largestOf(call, Role::kdQ));
  b.dk = std::max(b.dk, largestOf(call, Role::kdK));
  b.dv = std::max(b.dv, largestOf(call, Role::kdV));
  if (layer.buckets.back().index - layer.buckets.front().index >= kBucketsPerLayer) coarsen();
  return warnings;
}

std::vector<TrendWarning> TrendKeeper::noteNonFinite(int64_t step) {
  if (nonfinite_step_) return {};
  nonfinite_step_ = step;
  if (!first_warning_) return {};
  first_warning_->nonfinite_step = step;
  return {*std::exchange(first_warning_, std::nullopt)};
}

Status TrendKeeper::write(sqlite3* db, const std::vector<TrendWarning>& warnings) {
  if (rewrite_) NANPROV_RETURN_IF_ERROR(sqlite::exec(db, "DELETE FROM trends"));
  if (!insert_row_) {
    NANPROV_ASSIGN_OR_RETURN(
        insert_row_,
        sqlite::prepare(
            db,
            "INSERT OR REPLACE INTO trends(layer, step, last_step, bucket_steps, calls, module, logit, logit_source, "
            "scores_dtype, max_o, max_dq, max_dk, max_dv) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"));
    NANPROV_ASSIGN_OR_RETURN(
        insert_warning_,
        sqlite::prepare(
            db,
            "INSERT OR IGNORE INTO trend_warnings(layer, module, kind, step, value, from_step, from_value, source, "
            "scores_dtype, text) VALUES (?,?,?,?,?,?,?,?,?,?)"));
  }
  sqlite3_stmt* row = insert_row_.get();
  for (auto& [id, layer] : layers_) {
    for (Bucket& b : layer.buckets) {
      if (!b.dirty && !rewrite_) continue;
      sqlite3_reset(row);
      const bool has_logit = b.logit >= 0;
      sqlite::bindRow(row, id, b.index << shift_, b.last_step, bucketSteps(), b.calls,
                      sqlite::nullIfEmpty(layer.module), seen(b.logit),
                      has_logit ? std::optional<std::string>(logitSourceName(b.source)) : std::nullopt,
                      has_logit ? sqlite::nullIfEmpty(b.scores_dtype) : std::nullopt, seen(b.o), seen(b.dq), seen(b.dk),
                      seen(b.dv));
      if (sqlite3_step(row) != SQLITE_DONE) return Status::Error("trends: " + sqlite::errorOf(db));
      b.dirty = false;
    }
  }
  rewrite_ = false;
  if (warnings.empty()) return Status::Ok();
  sqlite3_stmt* warn = insert_warning_.get();
  for (const TrendWarning& w : warnings) {
    sqlite3_reset(warn);
    sqlite::bindRow(warn, w.layer, sqlite::nullIfEmpty(w.module), trendKindName(w.kind), w.step, w.value, w.from_step,
                    w.from_value, logitSourceName(w.source), sqlite::nullIfEmpty(w.scores_dtype), w.text());
    if (sqlite3_step(warn) != SQLITE_DONE) return Status::Error("trend_warnings: " + sqlite::errorOf(db));
  }
  return Status::Ok();
}

}  // namespace nanprov::store
