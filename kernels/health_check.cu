#include "kernels/health_check.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace nanprov::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Enough blocks per tensor to fill an H100/H200 several times over; beyond it each thread
// simply loops more.
constexpr int kMaxBlocksPerTensor = 1024;
constexpr int64_t kVectorsPerThreadTarget = 4;

struct CheckArgs {
  TensorView views[kMaxTensors];
  int count;
  CheckScratch* scratch;
  HealthCounts* results;
};

// Per-thread running counts. 32-bit is enough: no thread sees 2^32 elements.
struct Tally {
  unsigned int nan = 0, posinf = 0, neginf = 0, nonzero = 0, masked_rows = 0;
  float max_abs = 0.f;

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

__device__ int bytesOf(ElementType type) {
  return type == ElementType::kFloat32 ? 4 : type == ElementType::kBool ? 1 : 2;
}

// 16 bytes at a time: 4 fp32, or 8 fp16/bf16.
__device__ void addVector(const uint4& raw, ElementType type, Tally& t) {
  const unsigned int words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int w = 0; w < 4; ++w) {
    if (type == ElementType::kFloat32) {
      t.add(__uint_as_float(words[w]));
    } else if (type == ElementType::kBFloat16) {
      t.add(__uint_as_float(words[w] << 16));
      t.add(__uint_as_float(words[w] & 0xffff0000u));
    } else {
      t.add(__half2float(__ushort_as_half(static_cast<unsigned short>(words[w] & 0xffffu))));
      t.add(__half2float(__ushort_as_half(static_cast<unsigned short>(words[w] >> 16))));
    }
  }
}

// True when the innermost dimension is dense and every row starts on a 16-byte boundary: the
// layout of Q/K/V split from one projection, and of the fused kernels' transposed outputs.
__device__ bool rowsVectorisable(const TensorView& v, int size) {
  if (v.ndim == 0 || v.strides[v.ndim - 1] != 1 || (v.sizes[v.ndim - 1] * size) % 16 != 0) return false;
  if ((reinterpret_cast<uintptr_t>(v.data) & 15) != 0) return false;
  for (int d = 0; d < v.ndim - 1; ++d) {
    if ((v.strides[d] * size) % 16 != 0) return false;
  }
  return true;
}

template <typename Index>
__device__ void scanValues(const TensorView& v, Tally& t) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  const Index first = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Index numel = static_cast<Index>(v.numel);
  const int size = bytesOf(v.type);
  const bool aligned = (reinterpret_cast<uintptr_t>(v.data) & 15) == 0;
  if (v.type != ElementType::kBool && v.contiguous && aligned) {
    const Index per_vector = 16 / size;
    const Index vectors = numel / per_vector;
    const uint4* p = static_cast<const uint4*>(v.data);
    for (Index i = first; i < vectors; i += stride) addVector(__ldg(p + i), v.type, t);
    for (Index i = vectors * per_vector + first; i < numel; i += stride) t.add(widen(v.data, i, v.type));
  } else if (v.type != ElementType::kBool && rowsVectorisable(v, size)) {
    // One 16-byte vector per step, found by row: only the row index goes through division.
    const Index per_vector = 16 / size;
    const Index per_row = static_cast<Index>(v.sizes[v.ndim - 1]) / per_vector;
    const Index vectors = numel / per_vector;
    const uint4* p = static_cast<const uint4*>(v.data);
    for (Index i = first; i < vectors; i += stride) {
      Index row = i / per_row;
      int64_t offset = offsetOf<Index>(v, row, v.ndim - 1) + static_cast<int64_t>(i - row * per_row) * per_vector;
      addVector(__ldg(p + offset / per_vector), v.type, t);
    }
  } else if (v.contiguous) {
    for (Index i = first; i < numel; i += stride) t.add(widen(v.data, i, v.type));
  } else {
    for (Index i = first; i < numel; i += stride) t.add(widen(v.data, offsetOf<Index>(v, i, v.ndim), v.type));
  }
}

// A mask is read row by row (a row is one query against every key): a row with no visible key
// is fully masked. Masks are small next to Q/K/V, so one thread per row is plenty.
__device__ void scanMaskRows(const TensorView& v, Tally& t) {
  const int64_t row_len = v.ndim > 0 ? v.sizes[v.ndim - 1] : 1;
  if (row_len == 0) return;
  const int64_t rows = v.numel / row_len;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    bool visible = false;
    for (int64_t j = 0; j < row_len; ++j) {
      float x = widen(v.data, offsetOf<int64_t>(v, r * row_len + j, v.ndim), v.type);
      t.add(x);
      visible = visible || (v.mask == MaskKind::kBoolAllow ? x != 0.f : !(isinf(x) && x < 0.f));
    }
    t.masked_rows += !visible;
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
__device__ void accumulate(Tally t, CheckScratch* scratch, int tensor) {
  __shared__ unsigned int sums[5][kWarps];
  __shared__ float maxes[kWarps];
  unsigned int values[5] = {t.nan, t.posinf, t.neginf, t.nonzero, t.masked_rows};
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int c = 0; c < 5; ++c) values[c] = warpSum(values[c]);
  float m = warpMax(t.max_abs);
  if (lane == 0) {
    for (int c = 0; c < 5; ++c) sums[c][warp] = values[c];
    maxes[warp] = m;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int c = 0; c < 5; ++c) {
      unsigned long long total = 0;
      for (int w = 0; w < kWarps; ++w) total += sums[c][w];
      if (total) atomicAdd(&scratch->counts[tensor][c], total);
    }
    float block_max = 0.f;
    for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, maxes[w]);
    if (block_max > 0.f) atomicMax(&scratch->max_bits[tensor], __float_as_uint(block_max));
  }
}

__global__ void __launch_bounds__(kThreads) healthCheckKernel(CheckArgs args) {
  const int tensor = blockIdx.y;
  const TensorView& v = args.views[tensor];
  Tally t;
  if (v.mask != MaskKind::kNotAMask) {
    scanMaskRows(v, t);
  } else if (v.numel < (int64_t{1} << 31)) {
    scanValues<uint32_t>(v, t);
  } else {
    scanValues<int64_t>(v, t);
  }
  accumulate(t, args.scratch, tensor);

  // The last block of the whole grid publishes every tensor's counts and resets the scratch.
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned int total = gridDim.x * gridDim.y;
    last = atomicAdd(&args.scratch->blocks_done, 1u) == total - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < args.count; i += blockDim.x) {
    volatile unsigned long long* counts = args.scratch->counts[i];
    HealthCounts& out = args.results[i];
    out.nan = counts[0];
    out.posinf = counts[1];
    out.neginf = counts[2];
    out.nonzero = counts[3];
    out.masked_rows = counts[4];
    out.max_abs = __uint_as_float(*(volatile unsigned int*)&args.scratch->max_bits[i]);
    for (int c = 0; c < 5; ++c) counts[c] = 0;
    args.scratch->max_bits[i] = 0;
    out.written = 1;
  }
  if (threadIdx.x == 0) args.scratch->blocks_done = 0;
  __threadfence_system();
}

int blocksFor(const TensorView& v) {
  int64_t items = v.mask != MaskKind::kNotAMask ? v.numel / (v.ndim > 0 && v.sizes[v.ndim - 1] ? v.sizes[v.ndim - 1] : 1)
                                                : v.numel / 8;
  int64_t blocks = (items + kThreads * kVectorsPerThreadTarget - 1) / (kThreads * kVectorsPerThreadTarget);
  return static_cast<int>(blocks < 1 ? 1 : blocks > kMaxBlocksPerTensor ? kMaxBlocksPerTensor : blocks);
}

}  // namespace

bool checkable(const TensorView& view) {
  return view.ndim >= 0 && view.ndim <= kMaxDims && view.numel >= 0 &&
         (view.type == ElementType::kFloat32 || view.type == ElementType::kFloat16 ||
          view.type == ElementType::kBFloat16 || view.type == ElementType::kBool);
}

int launchHealthCheck(const TensorView* views, int count, CheckScratch* scratch, HealthCounts* results,
                      void* stream) {
  if (count <= 0 || count > kMaxTensors) return cudaErrorInvalidValue;
  CheckArgs args;
  args.count = count;
  args.scratch = scratch;
  args.results = results;
  int blocks = 1;
  for (int i = 0; i < count; ++i) {
    if (!checkable(views[i])) return cudaErrorInvalidValue;
    args.views[i] = views[i];
    int b = blocksFor(views[i]);
    blocks = b > blocks ? b : blocks;
  }
  dim3 grid(blocks, count);
  healthCheckKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return cudaGetLastError();
}

}  // namespace nanprov::kernels
