// MeasuredChecks: tensors measured for something other than an attention call (the gradient
// sentinel, the module trail, the collectives' checks): NaN and Inf counts and the largest finite
// |x|, handed to the MeasuredSink that asked (measured_sink.h). All on one CUDA device, checked on
// the device's current stream on this thread's lane (CheckLanes), and not held: the caller
// enqueues them after the work that made them, so stream order keeps their memory valid until
// the check ran. Up to kMaxMeasuredDense tensors in one dense check (kernels::launchDenseCheck)
// when each is dense float32/float16/bfloat16 and the dense check runs on this device
// (denseBatch); otherwise up to kMaxMeasured by the fused kernel, and more than that on the host.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/health_check.h"
#include "probes/libtorch/check_lanes.h"
#include "probes/libtorch/measured_sink.h"

namespace nanprov::probes {

class MeasuredChecks {
 public:
  using Counts = MeasuredCounts;
  static constexpr int kMaxMeasured = 12;
  static constexpr int kMaxMeasuredDense = kernels::kMaxDense;

  explicit MeasuredChecks(CheckLanes& lanes) : lanes_(lanes) {}
  MeasuredChecks(const MeasuredChecks&) = delete;
  MeasuredChecks& operator=(const MeasuredChecks&) = delete;

  // `sink` is handed the counts of `tensors` at a later poll, on the polling thread; a check that
  // failed on the device gives n = 0. What neither kernel can read is measured on the host at
  // once, `sink` handed it before measure returns (a counted host synchronisation). Returns false
  // when `sink` will never be handed them: the device's stream is capturing a CUDA graph, so
  // nothing may touch it.
  bool measure(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context);
  // How many dense tensors one measure() on `device` from this thread takes: kMaxMeasuredDense,
  // or kMaxMeasured where dense checks cannot run there (batch by this to stay on the device).
  int denseBatch(int device);
  // True when `t` can go in a dense check: a dense CUDA tensor the kernel reads.
  static bool denseCheckable(const at::Tensor& t);
  // True when a dense check of `t` also sums its words (kernels::wordSummable): its replica digest.
  static bool wordSummable(const at::Tensor& t);

  // measure()'s launches so far: dense checks, and fused checks of measured tensors.
  int64_t denseLaunches() const { return dense_launches_.load(std::memory_order_relaxed); }
  int64_t fusedLaunches() const { return fused_launches_.load(std::memory_order_relaxed); }

 private:
  // Enqueues `tensors` as one dense check on the lane's dense queue (made at its first use).
  // False when they are not all dense or the check cannot be launched: measure them otherwise.
  bool enqueueDense(CheckLane& lane, const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context,
                    const c10::Stream& stream);
  void measureOnHost(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context);

  CheckLanes& lanes_;
  std::atomic<int64_t> dense_launches_{0};
  std::atomic<int64_t> fused_launches_{0};
};

}  // namespace nanprov::probes
