// Runs and calls made up for the report's unit tests: what a store would load, without a store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "store/reader.h"

namespace nanprov::synthetic {

inline TensorHealth tensor(Role role, int64_t nan = 0, double max_abs = 1.0) {
  return TensorHealth{.role = role,
                      .dtype = DtypeName::intern("Float"),
                      .shape = *TensorShape::parse("[2,4,16,8]"),
                      .numel = 1024,
                      .nan = nan,
                      .max_abs = max_abs};
}

// A forward call of `layer` at `step`; its O holds `o_nan` NaN, its inputs are as large as `input`.
inline CallRecord forward(int rank, int64_t seq, int64_t step, int64_t layer, int64_t o_nan = 0, double input = 1.0) {
  CallRecord c;
  c.rank = rank, c.seq = seq, c.step = step, c.layer = layer, c.call = seq;
  c.phase = Phase::kForward;
  c.op = "aten::_scaled_dot_product_flash_attention_for_cpu";
  c.backend = "flash_cpu";
  c.module = "layers." + std::to_string(layer) + ".attn";
  c.start_ns = 1'000'000 + seq * 1000, c.end_ns = c.start_ns + 500;
  c.tensors = {tensor(Role::kQ, 0, input), tensor(Role::kK, 0, input), tensor(Role::kV, 0, input),
               tensor(Role::kO, o_nan)};
  return c;
}

// A forward call whose Q arrived holding NaN: values from upstream.
inline CallRecord upstream(int rank, int64_t seq, int64_t step, int64_t layer) {
  CallRecord c = forward(rank, seq, step, layer);
  c.tensors[0].nan = 3;
  c.tensors[3].nan = 1024;
  return c;
}

// One rank, step boundaries `steps`, and `calls` (ordered by step and time, as loadRun orders them).
inline store::RunData runOf(std::vector<CallRecord> calls, int64_t steps = 4,
                            const std::string& dir = "runs/synthetic") {
  store::RunData run;
  run.dir = dir;
  run.dirs = {dir};
  store::RankInfo rank;
  rank.rank = 0;
  rank.path = dir + "/rank-0.sqlite";
  rank.steps = steps;
  rank.calls_stored = static_cast<int64_t>(calls.size());
  rank.meta = {{"rank", "0"}, {"world_size", "1"}, {"host", "vm"}};
  run.ranks = {rank};
  run.total_calls = static_cast<int64_t>(calls.size());
  run.calls = std::move(calls);
  return run;
}

}  // namespace nanprov::synthetic
