// What the GPU kernel tests share: a host reference for the health counts of any view, random
// bit patterns, device buffers, and the skip where there is no GPU.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/health_check.h"

namespace nanprov::kernels::testing_support {

inline bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU() \
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device: runs in scripts/device-check.sh"

inline float halfToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

inline float bitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline float decode(const std::vector<uint8_t>& host, int64_t i, ElementType type) {
  switch (type) {
    case ElementType::kFloat32: {
      uint32_t b;
      std::memcpy(&b, &host[i * 4], 4);
      return bitsToFloat(b);
    }
    case ElementType::kFloat16: {
      uint16_t b;
      std::memcpy(&b, &host[i * 2], 2);
      return halfToFloat(b);
    }
    case ElementType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, &host[i * 2], 2);
      return bitsToFloat(uint32_t{b} << 16);
    }
    case ElementType::kBool: return host[i] ? 1.f : 0.f;
  }
  return 0;
}

inline int bytesOf(ElementType t) { return t == ElementType::kFloat32 ? 4 : t == ElementType::kBool ? 1 : 2; }

struct Expected {
  uint64_t nan = 0, posinf = 0, neginf = 0, nonzero = 0, masked_rows = 0;
  float max_abs = 0;
};

// One result of a check against the host reference's.
inline void expectCounts(const HealthCounts& got, const Expected& e) {
  EXPECT_EQ(got.nan, e.nan);
  EXPECT_EQ(got.posinf, e.posinf);
  EXPECT_EQ(got.neginf, e.neginf);
  EXPECT_EQ(got.nonzero, e.nonzero);
  EXPECT_EQ(got.masked_rows, e.masked_rows);
  EXPECT_EQ(got.max_abs, e.max_abs);
}

// Host reference over the elements a view addresses.
inline Expected reference(const std::vector<uint8_t>& host, const TensorView& v, int64_t base_offset) {
  Expected e;
  int64_t row_len = v.ndim ? v.sizes[v.ndim - 1] : 1;
  bool row_visible = false;
  for (int64_t i = 0; i < v.numel; ++i) {
    int64_t off = 0, rest = i;
    for (int d = v.ndim - 1; d >= 0; --d) {
      off += (rest % v.sizes[d]) * v.strides[d];
      rest /= v.sizes[d];
    }
    float x = decode(host, base_offset + off, v.type);
    if (std::isnan(x)) ++e.nan;
    else if (std::isinf(x)) ++(x > 0 ? e.posinf : e.neginf);
    else e.max_abs = std::max(e.max_abs, std::fabs(x));
    e.nonzero += x != 0.f;
    if (v.mask != MaskKind::kNotAMask) {
      if (i % row_len == 0) row_visible = false;
      row_visible = row_visible || (v.mask == MaskKind::kBoolAllow ? x != 0.f : !(x <= kHiddenBias));
      if (i % row_len == row_len - 1 && !row_visible) ++e.masked_rows;
    }
  }
  return e;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(const std::vector<uint8_t>& host) {
    EXPECT_EQ(cudaMalloc(&p, host.size() + 16), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
};

inline std::vector<uint8_t> randomBits(size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(bytes);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

inline TensorView view(const void* data, ElementType type, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorView v;
  v.data = data;
  v.type = type;
  v.ndim = static_cast<int32_t>(sizes.size());
  v.numel = 1;
  bool contiguous = true;
  int64_t expect = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = strides[d];
    v.numel *= sizes[d];
    contiguous = contiguous && (sizes[d] == 1 || strides[d] == expect);
    expect *= sizes[d];
  }
  v.contiguous = contiguous;
  return v;
}

}  // namespace nanprov::kernels::testing_support
