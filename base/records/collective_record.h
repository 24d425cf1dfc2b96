// One checked collective (c10d::allreduce_, a reduce-scatter, an all-gather, ...) that carried a
// non-finite value: its input on this rank before it ran and its output after. Collectives move
// values between ranks, so a rank whose gradients went non-finite only through one is told which
// collective, and which ranks sent the values (report/collective_paths.h).
#pragma once

#include <cstdint>
#include <string>

namespace nanprov {

// NaN and Inf counts and the largest finite |x| over all the tensors of one side of a collective.
struct CollectiveSide {
  bool checked = false;  // false: not read (a broadcast's receive buffer, a Work without a future)
  int64_t numel = 0, nan = 0, posinf = 0, neginf = 0;
  double max_abs = 0;
  int64_t nonfinite() const { return nan + posinf + neginf; }
};

struct CollectiveRecord {
  int rank = 0;       // the recording process's rank (the store's)
  int64_t step = 0;   // optimizer steps completed before it ran, as for attention calls
  int64_t ord = 0;    // its ordinal among its group's collectives in the step: equal on every rank
  std::string op;     // "c10d::allreduce_"
  std::string group;  // the process group's name ("0" for the default group)
  int64_t group_size = 0;
  int64_t tensors = 0;  // floating-point tensors it carried
  CollectiveSide input, output;
  int64_t time_ns = 0;  // CLOCK_REALTIME when it was issued
};

}  // namespace nanprov
