// The fused health kernel (and the dense check) against a host reference, on random bit patterns (so NaN, ±Inf,
// subnormals and zeros all occur), in every supported dtype and layout. Needs a GPU: skips
// cleanly without one, and runs in scripts/device-check.sh.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "kernels/health_check_queue.h"
#include "tests/kernels/check_reference.h"
#include "tests/kernels/stuck_stream.h"

namespace nanprov::kernels {
namespace {

using namespace testing_support;

// Runs one fused check of `views` and compares each against the host reference.
void expectMatches(const std::vector<uint8_t>& host, const std::vector<TensorView>& views,
                   const std::vector<int64_t>& base_offsets) {
  auto queue = HealthCheckQueue::create(0, 4);
  ASSERT_TRUE(queue.ok()) << queue.status().message();
  std::vector<HealthCounts> got;
  auto ready = [&](uint64_t, const HealthCounts* c, int n) { got.assign(c, c + n); };
  ASSERT_TRUE((*queue)->submit(views.data(), static_cast<int>(views.size()), nullptr, 1, ready).ok());
  EXPECT_EQ((*queue)->drain(ready), 1);
  ASSERT_EQ(got.size(), views.size()) << "the check failed on the device";
  for (size_t i = 0; i < views.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i));
    expectCounts(got[i], reference(host, views[i], base_offsets[i]));
  }
}

class EveryType : public testing::TestWithParam<ElementType> {};

TEST_P(EveryType, ContiguousStridedAndUnalignedViewsCountExactly) {
  REQUIRE_GPU();
  const ElementType type = GetParam();
  const int esize = bytesOf(type);
  const std::vector<int64_t> shape = {3, 5, 67, 33};  // odd sizes: vector tails everywhere
  int64_t numel = 3 * 5 * 67 * 33;
  std::vector<uint8_t> host = randomBits(static_cast<size_t>(numel + 8) * esize, 1234u + static_cast<uint32_t>(type));
  DeviceBuffer dev(host);
  auto* base = static_cast<uint8_t*>(dev.p);
  std::vector<TensorView> views = {
      view(base, type, shape, {5 * 67 * 33, 67 * 33, 33, 1}),           // contiguous, aligned
      view(base, type, {3, 67, 5, 33}, {5 * 67 * 33, 33, 67 * 33, 1}),  // transposed (B,S,H,D)
      view(base + esize, type, {numel - 1}, {1}),                       // unaligned start
      view(base, type, {3, 5, 33, 34}, {5 * 67 * 33, 67 * 33, 1, 33}),  // last two dims swapped
      view(base, type, {3, 5, 10, 33}, {5 * 67 * 33, 67 * 33, 66, 1}),  // every other row
  };
  expectMatches(host, views, {0, 0, 1, 0, 0});
}

TEST_P(EveryType, QkvSplitFromOneProjectionTakesTheRowPathExactly) {
  REQUIRE_GPU();
  // qkv.view(B, S, 3, H, D).permute(2, 0, 3, 1, 4): Q, K and V are strided views whose rows of
  // D elements are dense, the layout attention sees most often.
  const ElementType type = GetParam();
  const int64_t B = 2, S = 48, H = 4, D = 64;
  const int esize = bytesOf(type);
  std::vector<uint8_t> host =
      randomBits(static_cast<size_t>(B * S * 3 * H * D) * esize, 99u + static_cast<uint32_t>(type));
  DeviceBuffer dev(host);
  auto* base = static_cast<uint8_t*>(dev.p);
  std::vector<TensorView> views;
  std::vector<int64_t> offsets;
  for (int64_t which = 0; which < 3; ++which) {
    int64_t offset = which * H * D;
    views.push_back(view(base + offset * esize, type, {B, H, S, D}, {S * 3 * H * D, D, 3 * H * D, 1}));
    offsets.push_back(offset);
  }
  ASSERT_FALSE(views[0].contiguous);
  expectMatches(host, views, offsets);
}

TEST_P(EveryType, FiniteDataTakesTheWordPathAndAliasedRolesAreReadOnce) {
  REQUIRE_GPU();
  // Mostly finite values (the common case, counted a whole word at a time) with a few zeros,
  // subnormals and one Inf, in a tensor passed three times: q = k = v of self-attention.
  const ElementType type = GetParam();
  const int esize = bytesOf(type);
  const int64_t numel = 1 << 16;
  std::vector<uint8_t> host = randomBits(static_cast<size_t>(numel) * esize, 5u + static_cast<uint32_t>(type));
  for (int64_t i = 0; i < numel; ++i) {
    uint8_t& top = host[static_cast<size_t>(i * esize + esize - 1)];
    top &= 0xbf;  // exponent's top bit cleared: finite, every magnitude below 2
    if (i % 97 == 0) std::memset(&host[static_cast<size_t>(i * esize)], 0, static_cast<size_t>(esize));
    if (i % 89 == 0) top &= 0x80;  // sign kept, exponent's high bits cleared: tiny or subnormal
  }
  const std::vector<uint8_t> inf = type == ElementType::kFloat32   ? std::vector<uint8_t>{0, 0, 0x80, 0x7f}
                                   : type == ElementType::kFloat16 ? std::vector<uint8_t>{0, 0x7c}
                                                                   : std::vector<uint8_t>{0x80, 0x7f};
  std::memcpy(&host[static_cast<size_t>(4321 * esize)], inf.data(), inf.size());
  DeviceBuffer dev(host);
  TensorView v = view(dev.p, type, {numel}, {1});
  expectMatches(host, {v, v, v}, {0, 0, 0});
}

INSTANTIATE_TEST_SUITE_P(HealthCheck, EveryType,
                         testing::Values(ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16),
                         [](const auto& info) {
                           return info.param == ElementType::kFloat32   ? std::string("fp32")
                                  : info.param == ElementType::kFloat16 ? std::string("fp16")
                                                                        : std::string("bf16");
                         });

// A batch of deferred calls in one launch (probes/libtorch/device_checks.h): kMaxTensors views,
// calls whose roles alias one another and each other's (a backward reads its forward's Q, K, V and
// O again), every type and layout; each result must be its own tensor's count, exactly. Run twice
// on a one-slot queue, so the second also proves the first left all 24 accumulators zeroed.
TEST(HealthCheck, AFullBatchOfCallsCountsEachSliceExactlyAndTwice) {
  REQUIRE_GPU();
  static_assert(kMaxTensors == 24);
  std::vector<std::vector<uint8_t>> hosts;
  std::deque<DeviceBuffer> buffers;  // built in place: a DeviceBuffer frees its memory once
  std::vector<TensorView> distinct;
  const ElementType types[] = {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16};
  for (int i = 0; i < 12; ++i) {
    const ElementType type = types[i % 3];
    const int64_t rows = 17 + 5 * i, cols = 33 + (i % 4);
    hosts.push_back(randomBits(static_cast<size_t>(rows * cols) * bytesOf(type), 500u + static_cast<uint32_t>(i)));
    buffers.emplace_back(hosts.back());
    distinct.push_back(i % 2 == 0 ? view(buffers.back().p, type, {rows, cols}, {cols, 1})
                                  : view(buffers.back().p, type, {cols, rows}, {1, cols}));  // transposed
  }
  // Four "calls" of six views each: the later ones repeat the earlier ones' tensors, as a batch
  // holding a forward and its backward does.
  std::vector<TensorView> views;
  std::vector<size_t> from;
  for (int call = 0; call < 4; ++call) {
    for (int role = 0; role < 6; ++role) {
      const size_t t = static_cast<size_t>((call * 6 + role) % 12);
      views.push_back(distinct[t]);
      from.push_back(t);
    }
  }
  ASSERT_EQ(views.size(), static_cast<size_t>(kMaxTensors));
  auto queue = HealthCheckQueue::create(0, 1);
  ASSERT_TRUE(queue.ok()) << queue.status().message();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<HealthCounts> got;
    auto ready = [&](uint64_t, const HealthCounts* c, int n) { got.assign(c, c + n); };
    ASSERT_TRUE((*queue)->submit(views.data(), kMaxTensors, nullptr, 1, ready).ok());
    (*queue)->drain(ready);
    ASSERT_EQ(got.size(), views.size()) << "the check failed on the device";
    for (size_t i = 0; i < views.size(); ++i) {
      SCOPED_TRACE("result " + std::to_string(i));
      expectCounts(got[i], reference(hosts[from[i]], views[i], 0));
    }
  }
  EXPECT_FALSE((*queue)->submit(views.data(), kMaxTensors + 1, nullptr, 2).ok()) << "more than a launch takes";
}

TEST(HealthCheck, AllZeroAndEmptyTensors) {
  REQUIRE_GPU();
  std::vector<uint8_t> host(4096 * 2, 0);
  host[2 * 4000] = 0x00;
  host[2 * 4000 + 1] = 0x80;  // bf16 -0.0: still zero
  DeviceBuffer dev(host);
  std::vector<TensorView> views = {view(dev.p, ElementType::kBFloat16, {4096}, {1}),
                                   view(dev.p, ElementType::kBFloat16, {0}, {1})};
  expectMatches(host, views, {0, 0});
}

TEST(HealthCheck, MasksCountFullyMaskedRowsThroughBroadcasts) {
  REQUIRE_GPU();
  const int64_t B = 2, S = 64;
  // A bool padding mask [B,1,S,S] (True = may attend) with rows 10..25 hidden in batch 1.
  std::vector<uint8_t> mask(B * S * S, 1);
  for (int64_t r = 10; r < 26; ++r)
    for (int64_t k = 0; k < S; ++k) mask[(1 * S + r) * S + k] = 0;
  // An additive fp32 mask [S,S] with rows 0..2 all -inf and a -inf diagonal elsewhere; rows 3..4
  // hidden by -65536, as SDPA converts a bool mask for cuDNN, and row 5 by a bias of -1e4 only,
  // which leaves its keys a weight: not hidden.
  std::vector<uint8_t> additive(S * S * 4, 0);
  const float ninf = -std::numeric_limits<float>::infinity(), converted = -65536.f, large = -1e4f;
  for (int64_t r = 0; r < S; ++r)
    for (int64_t k = 0; k < S; ++k) {
      const float* bias = r < 3 || k == r ? &ninf : r < 5 ? &converted : r == 5 ? &large : nullptr;
      if (bias) std::memcpy(&additive[(r * S + k) * 4], bias, 4);
    }
  DeviceBuffer bool_dev(mask), add_dev(additive);
  TensorView bool_view = view(bool_dev.p, ElementType::kBool, {B, 4, S, S}, {S * S, 0, S, 1});  // heads broadcast
  bool_view.mask = MaskKind::kBoolAllow;
  TensorView add_view = view(add_dev.p, ElementType::kFloat32, {S, S}, {S, 1});
  add_view.mask = MaskKind::kAdditive;
  auto queue = HealthCheckQueue::create(0, 4);
  ASSERT_TRUE(queue.ok());
  std::vector<HealthCounts> got;
  auto ready = [&](uint64_t, const HealthCounts* c, int n) { got.assign(c, c + n); };
  std::vector<TensorView> views = {bool_view, add_view};
  ASSERT_TRUE((*queue)->submit(views.data(), 2, nullptr, 1, ready).ok());
  (*queue)->drain(ready);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].masked_rows, 16u * 4) << "16 rows, seen once per broadcast head";
  EXPECT_EQ(got[1].masked_rows, 5u);
  EXPECT_EQ(got[1].neginf, 3u * S + (S - 3));
}

TEST(HealthCheck, QueueReusesSlotsAndWaitsOnlyWhenFull) {
  REQUIRE_GPU();
  std::vector<uint8_t> host = randomBits(1 << 16, 7);
  DeviceBuffer dev(host);
  TensorView v = view(dev.p, ElementType::kBFloat16, {1 << 15}, {1});
  Expected e = reference(host, v, 0);
  auto queue = HealthCheckQueue::create(0, 2);
  ASSERT_TRUE(queue.ok());
  std::vector<uint64_t> tokens;
  auto ready = [&](uint64_t token, const HealthCounts* c, int n) {
    ASSERT_EQ(n, 1);
    EXPECT_EQ(c[0].nan, e.nan) << "a reused slot starts from zero";
    tokens.push_back(token);
  };
  for (uint64_t t = 1; t <= 5; ++t) ASSERT_TRUE((*queue)->submit(&v, 1, nullptr, t, ready).ok());
  (*queue)->drain(ready);
  EXPECT_EQ(tokens, (std::vector<uint64_t>{1, 2, 3, 4, 5})) << "results come back in order";
  // Two slots: the 3rd, 4th and 5th submits each found the ring full. Each took the finished
  // checks without waiting, and waited (counted) only where the oldest had not finished yet.
  EXPECT_LE((*queue)->forcedWaits(), 3);
}

// The dense check: 64 tensors of every float type in one launch, sizes from empty to large,
// starts at every alignment (the vector path and the element path), each against the reference;
// run twice on one slot, so the second also proves the first left its scratch zeroed.
TEST(DenseCheck, SixtyFourTensorsOfEveryTypeCountExactlyAndTwice) {
  REQUIRE_GPU();
  std::vector<uint8_t> host = randomBits(1 << 22, 11);
  DeviceBuffer dev(host);
  const ElementType types[] = {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16};
  const int64_t sizes[] = {0, 1, 7, 8, 1000, 4097, 65536, 300001};
  std::vector<DenseTensor> tensors;
  std::vector<TensorView> views;
  std::vector<int64_t> offsets;
  for (int i = 0; i < kMaxDense; ++i) {
    const ElementType type = types[i % 3];
    const int64_t numel = sizes[(i / 3) % 8];
    const int64_t start = (i * 7919) % (1 << 20) / bytesOf(type);  // aligned or not, by chance
    const void* data = static_cast<const uint8_t*>(dev.p) + start * bytesOf(type);
    tensors.push_back(DenseTensor::of(data, numel, type));
    views.push_back(view(data, type, {numel}, {1}));
    offsets.push_back(start);
  }
  auto queue = HealthCheckQueue::create(0, 1, CheckKind::kDense);
  ASSERT_TRUE(queue.ok()) << queue.status().message();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<HealthCounts> got;
    auto ready = [&](uint64_t, const HealthCounts* c, int n) { got.assign(c, c + n); };
    (*queue)->reserve(ready);
    ASSERT_TRUE((*queue)->submitDense(tensors.data(), kMaxDense, nullptr, 1).ok());
    EXPECT_EQ((*queue)->drain(ready), 1);
    ASSERT_EQ(got.size(), static_cast<size_t>(kMaxDense)) << "the check failed on the device";
    for (int i = 0; i < kMaxDense; ++i) {
      SCOPED_TRACE("tensor " + std::to_string(i));
      Expected e = reference(host, views[i], offsets[i]);
      EXPECT_EQ(got[i].nan, e.nan);
      EXPECT_EQ(got[i].posinf, e.posinf);
      EXPECT_EQ(got[i].neginf, e.neginf);
      EXPECT_EQ(got[i].nonzero, e.nonzero);
      EXPECT_EQ(got[i].max_abs, e.max_abs);
      // The replica digest taken on the way: the words summed, wrapping, where they are whole.
      ASSERT_EQ(got[i].word_summed != 0, wordSummable(tensors[i]));
      if (!wordSummable(tensors[i])) continue;
      uint32_t words = 0;
      const size_t from = static_cast<size_t>(offsets[i] * bytesOf(tensors[i].type()));
      for (size_t b = 0; b < static_cast<size_t>(tensors[i].numel() * bytesOf(tensors[i].type())); b += 4) {
        uint32_t word;
        std::memcpy(&word, host.data() + from + b, 4);
        words += word;
      }
      EXPECT_EQ(got[i].word_sum, words);
    }
  }
}

// The word sums of every dense type, each from a 16-byte aligned start, of sizes whose bytes end
// mid-vector (a tail of whole words) or mid-word (not summed), up to tensors spread over many
// blocks: each against the host's sum of the same words.
TEST(DenseCheck, WordSumsAreTheWrappingSumOfEveryWord) {
  REQUIRE_GPU();
  std::vector<uint8_t> host = randomBits(1 << 25, 17);
  DeviceBuffer dev(host);
  const ElementType types[] = {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16};
  const int64_t sizes[] = {2, 3, 6, 10, 4098, 1 << 20, (1 << 21) + 6};
  std::vector<DenseTensor> tensors;
  std::vector<uint32_t> expected;
  size_t start = 0;
  for (ElementType type : types) {
    for (int64_t numel : sizes) {
      const size_t bytes = static_cast<size_t>(numel * bytesOf(type));
      tensors.push_back(DenseTensor::of(static_cast<const uint8_t*>(dev.p) + start, numel, type));
      uint32_t sum = 0;
      for (size_t b = 0; b + 4 <= bytes; b += 4) {
        uint32_t word;
        std::memcpy(&word, host.data() + start + b, 4);
        sum += word;
      }
      expected.push_back(sum);
      start = (start + bytes + 15) / 16 * 16;
    }
  }
  ASSERT_LE(start, host.size());
  auto queue = HealthCheckQueue::create(0, 1, CheckKind::kDense);
  ASSERT_TRUE(queue.ok()) << queue.status().message();
  std::vector<HealthCounts> got;
  auto ready = [&](uint64_t, const HealthCounts* c, int n) { got.assign(c, c + n); };
  (*queue)->reserve(ready);
  ASSERT_TRUE((*queue)->submitDense(tensors.data(), static_cast<int>(tensors.size()), nullptr, 1).ok());
  EXPECT_EQ((*queue)->drain(ready), 1);
  ASSERT_EQ(got.size(), tensors.size()) << "the check failed on the device";
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + ": " + std::to_string(tensors[i].numel()) + " elements");
    ASSERT_TRUE(wordSummable(tensors[i]) || tensors[i].numel() % 2 == 1);
    EXPECT_EQ(got[i].word_summed != 0, wordSummable(tensors[i]));
    if (wordSummable(tensors[i])) EXPECT_EQ(got[i].word_sum, expected[i]);
  }
}

TEST(DenseCheck, EachQueueTakesOnlyItsOwnKindAndBounds) {
  REQUIRE_GPU();
  std::vector<uint8_t> host = randomBits(4096, 3);
  DeviceBuffer dev(host);
  TensorView v = view(dev.p, ElementType::kFloat32, {64}, {1});
  DenseTensor d = DenseTensor::of(dev.p, 64, ElementType::kFloat32);
  auto fused = HealthCheckQueue::create(0, 2);
  auto dense = HealthCheckQueue::create(0, 2, CheckKind::kDense);
  ASSERT_TRUE(fused.ok() && dense.ok());
  auto ready = [](uint64_t, const HealthCounts*, int) {};
  (*fused)->reserve(ready);
  (*dense)->reserve(ready);
  EXPECT_FALSE((*fused)->submitDense(&d, 1, nullptr, 1).ok());
  EXPECT_FALSE((*dense)->submit(&v, 1, nullptr, 1).ok());
  std::vector<DenseTensor> too_many(kMaxDense + 1, d);
  EXPECT_FALSE((*dense)->submitDense(too_many.data(), kMaxDense + 1, nullptr, 1).ok());
  DenseTensor flags = DenseTensor::of(dev.p, 64, ElementType::kBool);
  EXPECT_FALSE((*dense)->submitDense(&flags, 1, nullptr, 1).ok()) << "bool tensors are masks, not dense values";
  EXPECT_EQ((*dense)->inFlight(), 0) << "nothing refused was published";
}

// One check run to the end before a stream is held: CUDA loads a kernel's module at its first
// launch (lazy loading), and loading waits for the device, so a first launch while the stuck
// stream's kernel spins would never return. A training process has long loaded it by then.
void loadTheCheckKernel(HealthCheckQueue& queue, const TensorView& v) {
  int answered = 0;
  ASSERT_TRUE(queue.submit(&v, 1, nullptr, 99, [&](uint64_t, const HealthCounts*, int) { ++answered; }).ok());
  queue.drain([&](uint64_t, const HealthCounts*, int) { ++answered; });
  ASSERT_EQ(answered, 1);
  ASSERT_EQ(queue.forcedWaits(), 0);
}

// A full ring whose oldest check cannot have finished (its stream is held behind a spinning
// kernel) makes the producer wait, and that wait is counted: it is a host synchronisation.
TEST(HealthCheck, AFullRingOfUnfinishedChecksWaitsAndCountsIt) {
  REQUIRE_GPU();
  std::vector<uint8_t> host = randomBits(4096, 9);
  DeviceBuffer dev(host);
  TensorView v = view(dev.p, ElementType::kFloat32, {1024}, {1});
  auto queue = HealthCheckQueue::create(0, 2);
  ASSERT_TRUE(queue.ok());
  ASSERT_NO_FATAL_FAILURE(loadTheCheckKernel(**queue, v));
  fixtures::StuckStream stuck;
  ASSERT_TRUE(stuck.ok());
  void* stream = stuck.stream();

  std::vector<uint64_t> tokens;
  auto ready = [&](uint64_t token, const HealthCounts*, int n) {
    EXPECT_EQ(n, 1);
    tokens.push_back(token);
  };
  ASSERT_TRUE((*queue)->submit(&v, 1, stream, 1, ready).ok());
  ASSERT_TRUE((*queue)->submit(&v, 1, stream, 2, ready).ok());
  std::thread release([&stuck] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stuck.release();  // the stream moves again
  });
  ASSERT_TRUE((*queue)->submit(&v, 1, stream, 3, ready).ok());  // waits for check 1
  release.join();
  EXPECT_EQ((*queue)->forcedWaits(), 1);
  (*queue)->drain(ready);
  EXPECT_EQ(tokens, (std::vector<uint64_t>{1, 2, 3}));
}

// At exit the queue waits for checks in flight, but not for a stream that never moves again: past
// the deadline the check is handed over failed and counted, and the drain returns.
TEST(HealthCheck, DrainGivesUpOnAStuckStreamAtItsDeadline) {
  REQUIRE_GPU();
  std::vector<uint8_t> host = randomBits(4096, 5);
  DeviceBuffer dev(host);
  TensorView v = view(dev.p, ElementType::kFloat32, {1024}, {1});
  auto queue = HealthCheckQueue::create(0, 4);
  ASSERT_TRUE(queue.ok());
  ASSERT_NO_FATAL_FAILURE(loadTheCheckKernel(**queue, v));
  fixtures::StuckStream stuck;
  ASSERT_TRUE(stuck.ok());
  void* stream = stuck.stream();

  std::vector<int> counts;
  auto ready = [&](uint64_t, const HealthCounts*, int n) { counts.push_back(n); };
  ASSERT_TRUE((*queue)->submit(&v, 1, stream, 1, ready).ok());
  int unfinished = 0;
  const auto start = HealthCheckQueue::Clock::now();
  EXPECT_EQ((*queue)->drain(ready, start + std::chrono::milliseconds(300), &unfinished), 1);
  const auto waited = HealthCheckQueue::Clock::now() - start;
  EXPECT_EQ(unfinished, 1);
  EXPECT_EQ(counts, std::vector<int>{0}) << "handed over as failed: its counts were never written";
  EXPECT_GE(waited, std::chrono::milliseconds(300)) << "it waited up to the deadline";
  EXPECT_LT(waited, std::chrono::seconds(5)) << "and not much past it";

  EXPECT_TRUE(stuck.release(/*wait=*/true));  // the stream moves again; the abandoned check runs
}

TEST(HealthCheck, RefusesWhatItCannotRead) {
  TensorView v;
  v.type = static_cast<ElementType>(42);
  EXPECT_FALSE(checkable(v));
  v.type = ElementType::kFloat32;
  v.ndim = kMaxDims + 1;
  EXPECT_FALSE(checkable(v));
}

}  // namespace
}  // namespace nanprov::kernels
