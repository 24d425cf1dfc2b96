// What a measure() (MeasuredChecks) hands back: NaN and Inf counts and the largest finite |x| of
// each tensor, to the part that asked (the gradient sentinel, the module trail, the collectives'
// checks), which hands itself with each measure().
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/health_check.h"

namespace nanprov::probes {

struct MeasuredCounts {
  int64_t nan = 0, posinf = 0, neginf = 0;
  double max_abs = 0;  // largest finite |x|
  // A dense check's sum of the tensor's words, where it took one (kernels::HealthCounts): the
  // replica digest (replica_digests.h).
  bool word_summed = false;
  uint32_t word_sum = 0;
};

// Who a measure()'s counts go to, so counts collected on any thread reach their owner without
// looking for the process's probes.
class MeasuredSink {
 public:
  // `context` as given to measure(); `counts[0..n)` in the order of its tensors.
  void receive(uint64_t context, const MeasuredCounts* counts, int n) { measured(context, counts, n); }

 protected:
  ~MeasuredSink() = default;  // not owned through this interface

 private:
  virtual void measured(uint64_t context, const MeasuredCounts* counts, int n) = 0;
};

// The counts a measure() caller is handed, from a kernel's results (at most kernels::kMaxDense).
inline void handOver(MeasuredSink& sink, uint64_t context, const kernels::HealthCounts* counts, int n) {
  std::array<MeasuredCounts, kernels::kMaxDense> measured{};
  n = std::min(n, kernels::kMaxDense);
  for (int i = 0; i < n; ++i) {
    measured[static_cast<size_t>(i)] = {static_cast<int64_t>(counts[i].nan),
                                        static_cast<int64_t>(counts[i].posinf),
                                        static_cast<int64_t>(counts[i].neginf),
                                        counts[i].max_abs,
                                        counts[i].word_summed != 0,
                                        counts[i].word_sum};
  }
  sink.receive(context, measured.data(), n);
}

}  // namespace nanprov::probes
