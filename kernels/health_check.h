// The fused health check: one CUDA launch measures every tensor of one attention call (NaN, +Inf,
// -Inf, largest finite |x|, nonzero count and, for masks, fully masked query rows). Counts are
// exact. No LibTorch and no CUDA headers here, so the probes and the tests include it freely.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nanprov::kernels {

enum class ElementType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kBool = 3 };

// How a mask hides a key: bool masks allow where true; additive masks hide with a bias at or
// below kHiddenBias.
enum class MaskKind : int32_t { kNotAMask = 0, kBoolAllow = 1, kAdditive = 2 };

// An additive bias that gives its key exactly zero weight: -inf, or any value this negative.
// SDPA hands cuDNN a bool mask converted to a bf16 bias of -65536, not -inf; -65504 is float16's
// lowest, so one bound serves every mask dtype. A NaN bias hides nothing.
inline constexpr float kHiddenBias = -65504.0f;

inline constexpr int kMaxDims = 6;
// A backward call has 9 roles, a forward 6. 24 lets one launch check a batch of deferred calls
// (probes/libtorch/device_checks.h: two backward calls, or four forwards) while CheckArgs, the
// kernel's parameter block (24 views of 128 B plus the block split), stays under the classic 4 KB
// parameter limit, so no CUDA 12.1+ large-parameter rule is needed. The launch's cost does not
// depend on the parameters' size (docs/benchmarks.md, nanprov-launch-params); the scratch and the
// mapped results of a slot grow to 24 entries (about 2 KB a slot).
inline constexpr int kMaxTensors = 24;

// A tensor as the kernel reads it. Strides are in elements; a stride of 0 (broadcast) is fine.
struct TensorView {
  const void* data = nullptr;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int32_t ndim = 0;
  ElementType type = ElementType::kFloat32;
  MaskKind mask = MaskKind::kNotAMask;
  int32_t contiguous = 0;  // dense row-major: takes the vectorised path when 16-byte aligned
};

// Final counts of one tensor, written by the device into host-mapped pinned memory.
struct HealthCounts {
  unsigned long long nan;
  unsigned long long posinf;
  unsigned long long neginf;
  unsigned long long nonzero;
  unsigned long long masked_rows;  // masks only
  float max_abs;                   // largest finite |x|
  // The dense check only: the tensor's bytes read as 32-bit words and summed, wrapping, where
  // `word_summed` (wordSummable: whole 16-byte vectors from a 16-byte aligned start, a whole number
  // of words). It is the replica digest (probes/libtorch/replica_digests.h), taken on the way.
  uint32_t word_sum;
  uint32_t word_summed;
  uint32_t written;  // 1 once the device wrote this entry
};

// Device accumulators of one check of up to N tensors. Zeroed once when allocated; the last block
// of every check resets what it used, so a slot is ready again as soon as its check completed.
template <int N>
struct Accumulators {
  unsigned long long counts[N][5];
  unsigned int max_bits[N];   // bit pattern of a non-negative float: ordered like uint
  unsigned int word_sums[N];  // wrapping sums of the 32-bit words (HealthCounts::word_sum)
  unsigned int blocks_done;
};
using CheckScratch = Accumulators<kMaxTensors>;

// A check captured into a CUDA graph runs at every replay of the graph, and no host code runs
// then to hand it a slot. So it owns a ring in host-mapped memory: replay n's counts go to entry
// n % kGraphRingEntries, stamped n + 1 once written, and the host reads each replay's counts
// without asking the driver. The host reads an entry before kGraphRingEntries more replays
// overwrite it (it reads at every replay and step boundary); one it missed it can tell.
inline constexpr int kGraphRingEntries = 16;
struct GraphRingEntry {
  HealthCounts counts[kMaxTensors];
  unsigned long long stamp;  // 0 while written; replay number + 1 once complete
};
struct GraphRing {
  unsigned long long launches;  // replays whose check began publishing (device-side count)
  GraphRingEntry entries[kGraphRingEntries];
};

// The dense check: many dense tensors in one launch, each described in 16 bytes instead of a
// TensorView's 128, for the gradient sentinel's once-a-step check of every gradient and parameter
// (about 130 tensors of a small model in 2 launches a step, where 12 views to a launch took 11).
inline constexpr int kMaxDense = 64;
struct DenseTensor {
  const void* data = nullptr;
  uint64_t numel_and_type = 0;  // numel << 8 | ElementType: numel below 2^56

  static DenseTensor of(const void* data, int64_t numel, ElementType type) {
    return {data, static_cast<uint64_t>(numel) << 8 | static_cast<uint64_t>(type)};
  }
  int64_t numel() const { return static_cast<int64_t>(numel_and_type >> 8); }
  ElementType type() const { return static_cast<ElementType>(numel_and_type & 0xff); }
};
using DenseScratch = Accumulators<kMaxDense>;

// True when the dense check sums `t`'s words (HealthCounts::word_sum): it reads it as 16-byte
// vectors from a 16-byte aligned start, and its bytes are a whole number of 32-bit words. The
// kernel keeps the same rule (health_check.cu, wordSummed).
inline bool wordSummable(const DenseTensor& t) {
  const int64_t bytes = t.numel() * (t.type() == ElementType::kFloat32 ? 4 : 2);
  return t.type() != ElementType::kBool && reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && bytes % 4 == 0;
}

// True when `view` can be read by the kernel (supported type, at most kMaxDims dimensions).
bool checkable(const TensorView& view);

// Blocks of the check kernel that `device` (the current device) runs at once: one wave of them
// streams memory best. It queries the driver: asked once, when a queue is made, not per launch.
int residentBlocks(int device);
// The same for the dense check's kernel, which uses fewer registers and fits more blocks.
int residentDenseBlocks(int device);

// Enqueues the check of `views[0..count)` on `stream` (a cudaStream_t of the current device),
// in about `wave` blocks (residentBlocks of that device; each tensor gets at least one). `scratch` is device memory,
// `results` host-mapped pinned memory with room for `count` entries. Returns a cudaError_t
// value; 0 is success.
int launchHealthCheck(const TensorView* views, int count, CheckScratch* scratch, HealthCounts* results, void* stream,
                      int wave);

// As launchHealthCheck, for a stream that is capturing a CUDA graph: the check becomes a node of
// the graph, after a node that zeroes `scratch`, and every replay publishes into `ring` (device
// pointer of a host-mapped GraphRing whose memory started zeroed). The views' addresses are
// fixed in a graph, so each replay reads that replay's tensors.
int captureGraphHealthCheck(const TensorView* views, int count, CheckScratch* scratch, GraphRing* ring, void* stream,
                            int wave);

// The dense check of `tensors[0..count)` (count <= kMaxDense; float32, float16 or bfloat16, each
// dense in memory) on `stream`, as launchHealthCheck: `results` has room for `count` entries,
// `wave` is residentBlocks'. Returns a cudaError_t value; 0 is success.
int launchDenseCheck(const DenseTensor* tensors, int count, DenseScratch* scratch, HealthCounts* results, void* stream,
                     int wave);

}  // namespace nanprov::kernels
