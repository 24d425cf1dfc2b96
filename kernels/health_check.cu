#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/health_check.h"
#include "kernels/view_layout.h"

namespace nanprov::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Blocks per launch when the device cannot be asked how many it runs at once.
constexpr int kFallbackBlocks = 1024;
constexpr int64_t kVectorsPerThreadTarget = 4;
// 16-byte loads each thread keeps in flight: HBM needs tens of KB in flight per SM to stream.
constexpr int kUnroll = 4;

struct CheckArgs {
  TensorView views[kMaxTensors];  // distinct tensors only
  // Blocks [first_block[t], first_block[t + 1]) read views[t]: shares in proportion to size.
  unsigned int first_block[kMaxTensors + 1];
  int distinct;
  int source[kMaxTensors];  // result i comes from views[source[i]]
  int count;                // results
  CheckScratch* scratch;
  HealthCounts* results;
  GraphRing* ring;  // a check captured into a graph publishes here instead
};
// The classic kernel-parameter limit, which every toolkit and driver takes (health_check.h).
static_assert(sizeof(CheckArgs) <= 4096, "CheckArgs must fit the 4 KB kernel-parameter limit");

// The bit layout of a float type, two 16-bit lanes or one 32-bit lane per word. On |x|'s bits
// (sign cleared), adding `finite_gap` carries into a lane's top bit exactly when the exponent is
// all ones (Inf or NaN), and adding `abs_mask` exactly when |x| is nonzero; lanes never carry
// into each other. For non-negative floats, integer order of the bits is numeric order.
template <ElementType T>
struct Lanes {
  static constexpr bool kHalves = T != ElementType::kFloat32;
  static constexpr unsigned int abs_mask = kHalves ? 0x7fff7fffu : 0x7fffffffu;
  static constexpr unsigned int top = kHalves ? 0x80008000u : 0x80000000u;
  static constexpr unsigned int finite_gap = T == ElementType::kFloat32    ? 0x00800000u
                                             : T == ElementType::kBFloat16 ? 0x00800080u
                                                                           : 0x04000400u;
};

// The blocks that read one tensor, and which of them this one is: a grid-stride loop over the
// tensor strides by all of them.
struct Share {
  unsigned int block, blocks;
  template <typename Index>
  __device__ Index firstThread() const {
    return static_cast<Index>(block) * blockDim.x + threadIdx.x;
  }
  template <typename Index>
  __device__ Index threads() const {
    return static_cast<Index>(blocks) * blockDim.x;
  }
};

// Per-thread running counts. 32-bit is enough: no thread sees 2^32 elements.
struct Tally {
  unsigned int nan = 0, posinf = 0, neginf = 0, nonzero = 0, masked_rows = 0;
  float max_abs = 0.f;
  // Largest |x| bits of finite values met on the fast path: the high lane (or the only one) in
  // `high_bits`, the low lane shifted up in `low_bits`. Turned into a float once, at the end.
  unsigned int high_bits = 0, low_bits = 0;
  // The wrapping sum of the 32-bit words read as vectors (and of a dense tail's whole words):
  // only the dense check publishes it (HealthCounts::word_sum).
  unsigned int word_sum = 0;

  __device__ void add(float x) {
    if (isnan(x)) {
      ++nan;
    } else if (isinf(x)) {
      ++(x > 0.f ? posinf : neginf);
    } else {
      max_abs = fmaxf(max_abs, fabsf(x));
    }
    nonzero += x != 0.f;  // NaN != 0 holds: a NaN is not a zero
  }
};

__host__ __device__ int elementBytes(ElementType type) {
  return type == ElementType::kFloat32 ? 4 : type == ElementType::kBool ? 1 : 2;
}

__device__ float widen(const void* base, int64_t offset, ElementType type) {
  switch (type) {
    case ElementType::kFloat32: return static_cast<const float*>(base)[offset];
    case ElementType::kFloat16: return __half2float(static_cast<const __half*>(base)[offset]);
    case ElementType::kBFloat16:
      // bf16 is the top half of an fp32: widening is a shift, exact.
      return __uint_as_float(static_cast<unsigned int>(static_cast<const unsigned short*>(base)[offset]) << 16);
    case ElementType::kBool: return static_cast<const unsigned char*>(base)[offset] ? 1.f : 0.f;
  }
  return 0.f;
}

// The float a lane's bits stand for (bits in the low 16 for half types).
template <ElementType T>
__device__ float laneValue(unsigned int bits) {
  if constexpr (T == ElementType::kFloat32) return __uint_as_float(bits);
  else if constexpr (T == ElementType::kBFloat16) return __uint_as_float(bits << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

template <ElementType T>
__device__ void finishLanes(Tally& t) {
  if constexpr (Lanes<T>::kHalves) {
    t.max_abs = fmaxf(t.max_abs, fmaxf(laneValue<T>(t.high_bits >> 16), laneValue<T>(t.low_bits >> 16)));
  } else {
    t.max_abs = fmaxf(t.max_abs, laneValue<T>(t.high_bits));
  }
}

// Element offset of linear index `i` in a strided view (row-major over the first `dims` sizes).
// Index is 32-bit whenever the tensor allows it: 64-bit division is emulated and many times slower.
template <typename Index>
__device__ int64_t offsetOf(const TensorView& v, Index i, int dims) {
  int64_t offset = 0;
  for (int d = dims - 1; d >= 0; --d) {
    Index size = static_cast<Index>(v.sizes[d]);
    offset += static_cast<int64_t>(i % size) * v.strides[d];
    i /= size;
  }
  return offset;
}

// Division of 32-bit numbers below 2^31 by a fixed divisor as a multiply-high, add and shift
// (Granlund and Montgomery): a hardware-less 32-bit division costs about twenty instructions.
struct Divider {
  unsigned int magic, shift;
  __device__ explicit Divider(unsigned int d) {
    shift = d > 1 ? 32 - __clz(d - 1) : 0;  // ceil(log2 d)
    magic = static_cast<unsigned int>(((1ull << 32) * ((1ull << shift) - d)) / d + 1);
  }
  __device__ unsigned int quotient(unsigned int n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// 16 bytes, one element at a time: the exact path, for vectors holding an Inf or a NaN.
template <ElementType T>
__device__ void addVectorExactly(const uint4& raw, Tally& t) {
  const unsigned int words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int w = 0; w < 4; ++w) {
    if constexpr (Lanes<T>::kHalves) {
      t.add(laneValue<T>(words[w] & 0xffffu));
      t.add(laneValue<T>(words[w] >> 16));
    } else {
      t.add(laneValue<T>(words[w]));
    }
  }
}

// 16 bytes with integer bit tricks on whole words: about ten integer operations per word, which
// keeps the check on the memory's pace. Vectors with an Inf or a NaN (rare) are counted exactly.
template <ElementType T>
__device__ void addVector(const uint4& raw, Tally& t) {
  using L = Lanes<T>;
  const unsigned int a[4] = {raw.x & L::abs_mask, raw.y & L::abs_mask, raw.z & L::abs_mask, raw.w & L::abs_mask};
  const unsigned int nonfinite =
      ((a[0] + L::finite_gap) | (a[1] + L::finite_gap) | (a[2] + L::finite_gap) | (a[3] + L::finite_gap)) & L::top;
  if (nonfinite) {
    addVectorExactly<T>(raw, t);
    return;
  }
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    t.nonzero += __popc((a[w] + L::abs_mask) & L::top);
    t.high_bits = max(t.high_bits, a[w]);
    if constexpr (L::kHalves) t.low_bits = max(t.low_bits, a[w] << 16);
  }
}

// Visits `vectors` 16-byte vectors, `kUnroll` loads in flight per thread. `address(i)` gives the
// i-th vector; the i are this thread's share of a grid-stride loop.
template <ElementType T, typename Index, typename Address>
__device__ void scanVectors(const Share& share, Index vectors, Address address, Tally& t) {
  const Index stride = share.threads<Index>();
  for (Index i = share.firstThread<Index>(); i < vectors; i += stride * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < vectors) raw[u] = __ldg(address(i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < vectors) {
        t.word_sum += raw[u].x + raw[u].y + raw[u].z + raw[u].w;
        addVector<T>(raw[u], t);
      }
    }
  }
}

// True when the view (simplified: see view_layout.h) is rows of dense, 16-byte aligned vectors.
__device__ bool rowsVectorisable(const TensorView& v, int size) {
  if (v.ndim == 0 || v.strides[v.ndim - 1] != 1 || (v.sizes[v.ndim - 1] * size) % 16 != 0) return false;
  if ((reinterpret_cast<uintptr_t>(v.data) & 15) != 0) return false;
  for (int d = 0; d < v.ndim - 1; ++d) {
    if ((v.strides[d] * size) % 16 != 0) return false;
  }
  return true;
}

template <ElementType T, typename Index>
__device__ void scanValues(const Share& share, const TensorView& v, Tally& t) {
  const Index stride = share.threads<Index>();
  const Index first = share.firstThread<Index>();
  const Index numel = static_cast<Index>(v.numel);
  constexpr int size = T == ElementType::kFloat32 ? 4 : 2;
  constexpr Index per_vector = 16 / size;
  const uint4* p = static_cast<const uint4*>(v.data);
  const bool aligned = (reinterpret_cast<uintptr_t>(v.data) & 15) == 0;
  if (v.contiguous && aligned) {
    const Index vectors = numel / per_vector;
    scanVectors<T>(share, vectors, [p](Index i) { return p + i; }, t);
    for (Index i = vectors * per_vector + first; i < numel; i += stride) t.add(widen(v.data, i, T));
    // The tail's whole words, for the word sum (used only where the tail is whole words).
    const auto* tail = reinterpret_cast<const unsigned int*>(p + vectors);
    const Index tail_words = (numel - vectors * per_vector) * size / 4;
    for (Index w = first; w < tail_words; w += stride) t.word_sum += tail[w];
  } else if (rowsVectorisable(v, size)) {
    const Index per_row = static_cast<Index>(v.sizes[v.ndim - 1]) / per_vector;
    if (v.ndim == 2 && sizeof(Index) == 4) {
      // Uniform rows (Q, K, V split from one projection): a multiply-high per vector finds its row.
      const int64_t row_stride = v.strides[0] / per_vector;
      const Divider by_row(static_cast<unsigned int>(per_row));
      scanVectors<T>(
          share, numel / per_vector,
          [p, per_row, row_stride, by_row](Index i) {
            Index row = by_row.quotient(static_cast<unsigned int>(i));
            return p + row * row_stride + (i - row * per_row);
          },
          t);
    } else {
      scanVectors<T>(
          share, numel / per_vector,
          [&v, p, per_row](Index i) {
            Index row = i / per_row;
            return p + (offsetOf<Index>(v, row, v.ndim - 1) / per_vector + (i - row * per_row));
          },
          t);
    }
  } else if (v.contiguous) {
    for (Index i = first; i < numel; i += stride) t.add(widen(v.data, i, T));
  } else {
    for (Index i = first; i < numel; i += stride) t.add(widen(v.data, offsetOf<Index>(v, i, v.ndim), T));
  }
  finishLanes<T>(t);
}

template <typename Index>
__device__ void scanValuesOfType(const Share& share, const TensorView& v, Tally& t) {
  switch (v.type) {
    case ElementType::kFloat32: scanValues<ElementType::kFloat32, Index>(share, v, t); break;
    case ElementType::kFloat16: scanValues<ElementType::kFloat16, Index>(share, v, t); break;
    case ElementType::kBFloat16: scanValues<ElementType::kBFloat16, Index>(share, v, t); break;
    case ElementType::kBool: {
      const Index stride = share.threads<Index>();
      for (Index i = share.firstThread<Index>(); i < static_cast<Index>(v.numel); i += stride) {
        t.add(widen(v.data, offsetOf<Index>(v, i, v.ndim), v.type));
      }
      break;
    }
  }
}

// A mask is read row by row (a row is one query against every key): a row with no visible key
// is fully masked. One warp per row, so the reads of a row are coalesced.
__device__ void scanMaskRows(const Share& share, const TensorView& v, Tally& t) {
  const int64_t row_len = v.ndim > 0 ? v.sizes[v.ndim - 1] : 1;
  const int64_t key_stride = v.ndim > 0 ? v.strides[v.ndim - 1] : 0;
  if (row_len == 0) return;
  const int64_t rows = v.numel / row_len;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(share.blocks) * kWarps;
  for (int64_t r = static_cast<int64_t>(share.block) * kWarps + threadIdx.x / 32; r < rows; r += warps) {
    const int64_t row_offset = offsetOf<int64_t>(v, r, v.ndim - 1);
    bool visible = false;
    for (int64_t j = lane; j < row_len; j += 32) {
      float x = widen(v.data, row_offset + j * key_stride, v.type);
      t.add(x);
      visible = visible || (v.mask == MaskKind::kBoolAllow ? x != 0.f : !(x <= kHiddenBias));
    }
    if (__any_sync(0xffffffffu, visible) == 0 && lane == 0) ++t.masked_rows;
  }
}

__device__ unsigned int warpSum(unsigned int x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_down_sync(0xffffffffu, x, o);
  return x;
}

__device__ float warpMax(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_down_sync(0xffffffffu, x, o));
  return x;
}

// Reduces the block's tallies into the check's accumulators (one atomic per counter per block).
template <int N>
__device__ void accumulate(Tally t, Accumulators<N>* scratch, int tensor) {
  __shared__ unsigned int sums[6][kWarps];
  __shared__ float maxes[kWarps];
  unsigned int values[6] = {t.nan, t.posinf, t.neginf, t.nonzero, t.masked_rows, t.word_sum};
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int c = 0; c < 6; ++c) values[c] = warpSum(values[c]);  // the word sum wraps, as it should
  float m = warpMax(t.max_abs);
  if (lane == 0) {
    for (int c = 0; c < 6; ++c) sums[c][warp] = values[c];
    maxes[warp] = m;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int c = 0; c < 5; ++c) {
      unsigned long long total = 0;
      for (int w = 0; w < kWarps; ++w) total += sums[c][w];
      if (total) atomicAdd(&scratch->counts[tensor][c], total);
    }
    unsigned int word_sum = 0;
    for (int w = 0; w < kWarps; ++w) word_sum += sums[5][w];
    if (word_sum) atomicAdd(&scratch->word_sums[tensor], word_sum);
    float block_max = 0.f;
    for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, maxes[w]);
    if (block_max > 0.f) atomicMax(&scratch->max_bits[tensor], __float_as_uint(block_max));
  }
}

// Where the last block of a check writes its results: a queue slot's `results`, or, for a check
// inside a CUDA graph, the ring entry of this replay, whose stamp is cleared while it is written.
struct Destination {
  HealthCounts* results;
  GraphRing* ring;
};

// Once every block of the grid accumulated: the last one publishes every result and resets the
// scratch; the `written` flags (and a ring entry's stamp) come last, once both are visible to the
// host, so a host that sees them may take the counts and reuse the slot without asking the driver
// (health_check_queue.cpp, graph_check.cpp). Result i comes from tensor source(i), whose words
// were summed whole where summed(i); tensors [0, used) are reset.
template <int N, typename Source, typename Summed>
__device__ void publishOnceAllAccumulated(Accumulators<N>* scratch, Destination to, int count, int used, Source source,
                                          Summed summed) {
  __shared__ bool last;
  __shared__ unsigned long long replay;
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned int total = gridDim.x;
    last = atomicAdd(&scratch->blocks_done, 1u) == total - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  HealthCounts* results = to.results;
  GraphRingEntry* entry = nullptr;
  if (to.ring) {
    if (threadIdx.x == 0) {
      volatile GraphRing* ring = to.ring;
      replay = ring->launches;
      ring->launches = replay + 1;
      ring->entries[replay % kGraphRingEntries].stamp = 0;  // a reader copying it now must retry
      __threadfence_system();
    }
    __syncthreads();
    entry = &to.ring->entries[replay % kGraphRingEntries];
    results = entry->counts;
  }
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int from = source(i);
    volatile unsigned long long* counts = scratch->counts[from];
    volatile HealthCounts& out = results[i];
    out.nan = counts[0];
    out.posinf = counts[1];
    out.neginf = counts[2];
    out.nonzero = counts[3];
    out.masked_rows = counts[4];
    out.max_abs = __uint_as_float(*(volatile unsigned int*)&scratch->max_bits[from]);
    out.word_summed = summed(i) ? 1u : 0u;
    out.word_sum = out.word_summed ? *(volatile unsigned int*)&scratch->word_sums[from] : 0u;
  }
  __syncthreads();  // every result is read before its accumulators are reset
  for (int i = threadIdx.x; i < used; i += blockDim.x) {
    volatile unsigned long long* counts = scratch->counts[i];
    for (int c = 0; c < 5; ++c) counts[c] = 0;
    scratch->max_bits[i] = 0;
    scratch->word_sums[i] = 0;
  }
  if (threadIdx.x == 0) scratch->blocks_done = 0;
  __threadfence_system();  // this thread's counts and resets reach the host before any flag
  __syncthreads();         // ... and every thread's
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    *static_cast<volatile uint32_t*>(&results[i].written) = 1;
  }
  if (entry && threadIdx.x == 0) {
    __threadfence_system();
    *static_cast<volatile unsigned long long*>(&entry->stamp) = replay + 1;
  }
  __threadfence_system();
}

// Reads `v` with this block's share of its blocks.
__device__ void scanTensor(const Share& share, const TensorView& v, Tally& t) {
  if (v.mask != MaskKind::kNotAMask) {
    scanMaskRows(share, v, t);
  } else if (v.numel < (int64_t{1} << 31)) {
    scanValuesOfType<uint32_t>(share, v, t);
  } else {
    scanValuesOfType<int64_t>(share, v, t);
  }
}

__global__ void __launch_bounds__(kThreads) healthCheckKernel(CheckArgs args) {
  int tensor = 0;
  while (tensor + 1 < args.distinct && blockIdx.x >= args.first_block[tensor + 1]) ++tensor;
  const Share share{blockIdx.x - args.first_block[tensor], args.first_block[tensor + 1] - args.first_block[tensor]};
  Tally t;
  scanTensor(share, args.views[tensor], t);
  accumulate(t, args.scratch, tensor);
  publishOnceAllAccumulated(
      args.scratch, Destination{args.results, args.ring}, args.count, args.distinct,
      [&args](int i) { return args.source[i]; }, [](int) { return false; });
}

struct DenseArgs {
  DenseTensor tensors[kMaxDense];
  unsigned int first_block[kMaxDense + 1];  // as CheckArgs'
  int count;
  DenseScratch* scratch;
  HealthCounts* results;
};

// health_check.h's wordSummable, on the device: scanValues reads such a tensor as vectors and its
// tail as whole words.
__device__ bool wordSummed(const DenseTensor& d) {
  const auto type = static_cast<ElementType>(d.numel_and_type & 0xff);
  const auto numel = static_cast<int64_t>(d.numel_and_type >> 8);
  return type != ElementType::kBool && (reinterpret_cast<uintptr_t>(d.data) & 15) == 0 &&
         numel * elementBytes(type) % 4 == 0;
}

__global__ void __launch_bounds__(kThreads) denseCheckKernel(DenseArgs args) {
  // The last tensor whose first block is at or before this one: up to 64 of them, so a search.
  int lo = 0, hi = args.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (args.first_block[mid] <= blockIdx.x) lo = mid;
    else hi = mid - 1;
  }
  const DenseTensor d = args.tensors[lo];
  TensorView v;  // one dense run
  v.data = d.data;
  v.numel = static_cast<int64_t>(d.numel_and_type >> 8);  // DenseTensor's accessors are host code
  v.ndim = 1;
  v.sizes[0] = v.numel;
  v.strides[0] = 1;
  v.type = static_cast<ElementType>(d.numel_and_type & 0xff);
  v.contiguous = 1;
  const Share share{blockIdx.x - args.first_block[lo], args.first_block[lo + 1] - args.first_block[lo]};
  Tally t;
  scanTensor(share, v, t);
  accumulate(t, args.scratch, lo);
  publishOnceAllAccumulated(
      args.scratch, Destination{args.results, nullptr}, args.count, args.count, [](int i) { return i; },
      [&args](int i) { return wordSummed(args.tensors[i]); });
}

// Blocks that are useful for `v`: a few 16-byte vectors (or, for a mask, a few rows) per thread.
int64_t usefulBlocks(const TensorView& v) {
  int64_t items = v.mask != MaskKind::kNotAMask
                      ? v.numel / (v.ndim > 0 && v.sizes[v.ndim - 1] ? v.sizes[v.ndim - 1] : 1) * 32
                      : v.numel / 8;
  int64_t blocks = (items + kThreads * kVectorsPerThreadTarget - 1) / (kThreads * kVectorsPerThreadTarget);
  return blocks < 1 ? 1 : blocks;
}

// A tensor's blocks: its part of the wave by its share of the bytes, at least one, and no more
// than are useful. The wave of resident blocks shared out by size, every block then has about as
// much to read.
unsigned int blocksFor(int wave_blocks, double bytes, double total_bytes, int64_t useful) {
  const double wave = wave_blocks > 0 ? wave_blocks : kFallbackBlocks;
  int64_t share = total_bytes > 0 ? static_cast<int64_t>(wave * bytes / total_bytes + 0.5) : 1;
  share = share < 1 ? 1 : share > useful ? useful : share;
  return static_cast<unsigned int>(share);
}

}  // namespace

bool checkable(const TensorView& view) {
  return view.ndim >= 0 && view.ndim <= kMaxDims && view.numel >= 0 &&
         (view.type == ElementType::kFloat32 || view.type == ElementType::kFloat16 ||
          view.type == ElementType::kBFloat16 || view.type == ElementType::kBool);
}

namespace {

// One wave of resident blocks, each looping over its share, streams memory without the tail of
// block after block finishing (measured with ncu: 1024 blocks per tensor reached 55% of HBM
// bandwidth).
template <typename Kernel>
int residentBlocksOf(int device, Kernel kernel) {
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0) != cudaSuccess || sms * per_sm <= 0) {
    cudaGetLastError();  // not left for the next launch's error check to find
    return kFallbackBlocks;
  }
  return sms * per_sm;
}

}  // namespace

int residentBlocks(int device) { return residentBlocksOf(device, healthCheckKernel); }
int residentDenseBlocks(int device) { return residentBlocksOf(device, denseCheckKernel); }

namespace {

// The launch of one fused check of `views[0..count)`: its arguments and block count. `ok` is
// false when a view cannot be read.
struct FusedLaunch {
  CheckArgs args{};
  unsigned int blocks = 0;
  bool ok = false;
};

FusedLaunch planFusedCheck(const TensorView* views, int count, int wave_blocks) {
  FusedLaunch launch;
  if (count <= 0 || count > kMaxTensors) return launch;
  CheckArgs& args = launch.args;
  args.count = count;
  // A role that aliases another (self-attention's q = k = v) is read once and reported twice.
  int distinct = 0;
  double total_bytes = 0;
  for (int i = 0; i < count; ++i) {
    if (!checkable(views[i])) return launch;
    const TensorView view = simplified(views[i]);
    int from = 0;
    while (from < distinct && !sameElements(args.views[from], view)) ++from;
    if (from == distinct) {
      args.views[distinct++] = view;
      total_bytes += static_cast<double>(view.numel) * elementBytes(view.type);
    }
    args.source[i] = from;
  }
  args.distinct = distinct;
  unsigned int next = 0;
  for (int t = 0; t < distinct; ++t) {
    const double bytes = static_cast<double>(args.views[t].numel) * elementBytes(args.views[t].type);
    args.first_block[t] = next;
    next += blocksFor(wave_blocks, bytes, total_bytes, usefulBlocks(args.views[t]));
  }
  args.first_block[distinct] = next;
  launch.blocks = next;
  launch.ok = true;
  return launch;
}

}  // namespace

int launchHealthCheck(const TensorView* views, int count, CheckScratch* scratch, HealthCounts* results, void* stream,
                      int wave_blocks) {
  FusedLaunch launch = planFusedCheck(views, count, wave_blocks);
  if (!launch.ok) return cudaErrorInvalidValue;
  launch.args.scratch = scratch;
  launch.args.results = results;
  launch.args.ring = nullptr;
  healthCheckKernel<<<launch.blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(launch.args);
  return cudaGetLastError();
}

int captureGraphHealthCheck(const TensorView* views, int count, CheckScratch* scratch, GraphRing* ring, void* stream,
                            int wave_blocks) {
  FusedLaunch launch = planFusedCheck(views, count, wave_blocks);
  if (!launch.ok || !ring) return cudaErrorInvalidValue;
  launch.args.scratch = scratch;
  launch.args.results = nullptr;
  launch.args.ring = ring;
  // Zeroed at every replay: a replay cut short (its graph torn down mid-check) leaves nothing
  // behind for the next, and no zeroing outside the graph is needed while it is being captured.
  auto s = static_cast<cudaStream_t>(stream);
  if (cudaError_t err = cudaMemsetAsync(scratch, 0, sizeof(CheckScratch), s); err != cudaSuccess) return err;
  healthCheckKernel<<<launch.blocks, kThreads, 0, s>>>(launch.args);
  return cudaGetLastError();
}

int launchDenseCheck(const DenseTensor* tensors, int count, DenseScratch* scratch, HealthCounts* results, void* stream,
                     int wave_blocks) {
  if (count <= 0 || count > kMaxDense) return cudaErrorInvalidValue;
  DenseArgs args;
  args.count = count;
  args.scratch = scratch;
  args.results = results;
  double total_bytes = 0;
  for (int i = 0; i < count; ++i) {
    const ElementType type = tensors[i].type();
    if (type != ElementType::kFloat32 && type != ElementType::kFloat16 && type != ElementType::kBFloat16) {
      return cudaErrorInvalidValue;
    }
    if (tensors[i].numel() < 0 || (tensors[i].numel() > 0 && !tensors[i].data)) return cudaErrorInvalidValue;
    args.tensors[i] = tensors[i];
    total_bytes += static_cast<double>(tensors[i].numel()) * elementBytes(type);
  }
  unsigned int next = 0;
  for (int t = 0; t < count; ++t) {
    TensorView run;
    run.numel = tensors[t].numel();
    args.first_block[t] = next;
    next += blocksFor(wave_blocks, static_cast<double>(run.numel) * elementBytes(tensors[t].type()), total_bytes,
                      usefulBlocks(run));
  }
  args.first_block[count] = next;
  denseCheckKernel<<<next, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return cudaGetLastError();
}

}  // namespace nanprov::kernels
