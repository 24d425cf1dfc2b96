// KernelCorrelation: joins CUPTI's activity records into kernels per attention call. Pure
// logic, no CUPTI: the tracer feeds it decoded records, and the unit tests feed it synthetic
// ones.
//
// The join: while an attention call runs, the tracer has pushed external id `seq + 1` (0 never
// names a call). Every launch API call made meanwhile produces an EXTERNAL_CORRELATION record
// (correlation id → external id), and every kernel a CONCURRENT_KERNEL record carrying the
// launch's correlation id. The two kinds arrive in different buffers and in either order.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/records/call_record.h"

namespace nanprov {

// A kernel as CUPTI reports it; the name may still be mangled.
struct LaunchedKernel {
  uint32_t correlation_id = 0;
  std::string name;
  int grid[3] = {0, 0, 0};
  int block[3] = {0, 0, 0};
  int64_t start_ns = 0, end_ns = 0;
  int device = 0;
  int64_t stream = 0;
};

// "_Z..." names demangled; anything else returned as it is.
std::string demangleKernelName(const std::string& name);

inline uint64_t externalIdOfCall(int64_t seq) { return static_cast<uint64_t>(seq) + 1; }

class KernelCorrelation {
 public:
  void onExternalId(uint32_t correlation_id, uint64_t external_id);
  void onKernel(LaunchedKernel kernel);

  // Kernels joined to a call since the last take, demangled, in arrival order.
  std::vector<KernelRecord> takeAttributed();

  // Ends one collection round (a step). Kernels that found no call within two rounds ran
  // outside attention (the training's other kernels) and are forgotten. Id mappings live far
  // longer: CUPTI delivers a kernel buffer only once all of it is complete, which can be many
  // steps after the launch records arrived.
  void endRound();

  int64_t attributedTotal() const { return attributed_total_; }

 private:
  void attribute(LaunchedKernel&& kernel, uint64_t external_id);
  uint64_t callOf(uint32_t correlation_id) const;  // 0 when unknown

  // Bounds, so a run that never flushes cannot grow without limit.
  static constexpr size_t kMaxIds = 1 << 21;
  static constexpr size_t kMaxWaiting = 1 << 18;
  static constexpr int64_t kIdRounds = 4096;

  struct Mapping {
    uint64_t external_id;
    int64_t round;
  };
  std::unordered_map<uint32_t, Mapping> ids_;
  int64_t round_ = 0;
  std::vector<LaunchedKernel> waiting_, previous_waiting_;
  std::vector<KernelRecord> attributed_;
  int64_t attributed_total_ = 0;
};

}  // namespace nanprov
