// Private to store/: each layer's trend (issue 50), kept by the writer thread from every call it
// writes, whatever the store budget later keeps of the calls themselves. Per layer, buckets of
// steps aligned to 2^k (k rises when a layer would need more than kBucketsPerLayer, merging
// neighbours), each with its calls' largest attention logit (base/logit_trend.h) and |x| of O, dQ,
// dK, dV. So the `trends` table stays a few hundred rows per layer for any run length, and the
// report reads it in microseconds. The rule's warnings (LogitWatch) come back to the writer, which
// stores them and hands them to the probes to print.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/logit_trend.h"
#include "base/records/call_record.h"
#include "base/status.h"
#include "store/sqlite_db.h"

namespace nanprov::store {

class TrendKeeper {
 public:
  static constexpr int kBucketsPerLayer = 256;
  // Layers past this many (a model of thousands of attention modules) get no trend: the table
  // stays a few MB, and readers can refuse a larger one as damage.
  static constexpr size_t kLayersKept = 4096;

  // One call as written (with the rank it was written under); the warnings it raised, if any
  // (with nonfinite_step once noteNonFinite was told it).
  std::vector<TrendWarning> noteCall(const CallRecord& call);
  // The rank's values went non-finite at `step` (an edge, or the gradient sentinel's). The first
  // time: the first warning handed out before it (the one the live line said), again, with its
  // nonfinite_step, so the run says how many steps before the NaN it came. Otherwise none.
  std::vector<TrendWarning> noteNonFinite(int64_t step);
  // Writes the buckets changed since the last write, and `warnings`, in the caller's transaction.
  Status write(sqlite3* db, const std::vector<TrendWarning>& warnings);
  int64_t bucketSteps() const { return int64_t{1} << shift_; }
  // The transaction that wrote them rolled back: the next write rewrites every row.
  void rewriteAll() { rewrite_ = true; }

 private:
  struct Bucket {
    int64_t index = 0;  // step >> shift_
    int64_t first_step = 0, last_step = 0, calls = 0;
    double logit = -1, o = -1, dq = -1, dk = -1, dv = -1;  // -1: none seen
    LogitSource source = LogitSource::kLse;
    std::string scores_dtype;
    bool dirty = true;
    void merge(const Bucket& other);
  };
  struct Layer {
    std::string module;
    LogitWatch watch;
    std::vector<Bucket> buckets;  // by index
  };

  Bucket& bucketOf(Layer& layer, int64_t step);
  void coarsen();

  std::map<int64_t, Layer> layers_;
  std::optional<TrendWarning> first_warning_;  // the first handed out, until the values went non-finite
  std::optional<int64_t> nonfinite_step_;
  int shift_ = 0;
  bool rewrite_ = false;  // buckets merged: every row is rewritten
  // Prepared once, on the writer's connection: a step's write is a row or two per layer.
  sqlite::Stmt insert_row_, insert_warning_;
};

}  // namespace nanprov::store
