// The store's schema, one SQLite database per rank (rank-<r>.sqlite). Documented for users in
// store/README.md, because people query it with `nanprov sql`.
#pragma once

#include <vector>

namespace nanprov::store {

// 2: kernels, calls.device, calls.unattributed; 3: captures; 4: calls.recompute, sentinel;
// 5: signatures and notes stored once, calls.health with an index over the calls that are not
// clean, tensor rows only for calls that are not plain clean ones (calls.max_abs for those).
inline constexpr int kSchemaVersion = 5;

// 5, later: step_summaries, the store budget's per-(step, layer, phase) summaries (a store
// without the table was written before it, and summarised nothing).
// Its columns, in order; the maxima are in Role order.
// step_summaries' columns: 7 of the row, then one maximum per Role, in Role order, then not_clean
// (added later within 5: a store without the column summarised only clean calls).
extern const char* const kStepSummaryColumns[20];

// 5, later: trends and trend_warnings (base/logit_trend.h), written by the writer for every call.
extern const std::vector<const char*> kTrendColumns;
extern const std::vector<const char*> kTrendWarningColumns;
// 5, later: replica_digests (base/records/replica_digest.h).
extern const std::vector<const char*> kReplicaDigestColumns;

// Idempotent: every statement is CREATE ... IF NOT EXISTS.
extern const char* const kSchemaSql;

}  // namespace nanprov::store
