// The gradient sentinel's replica digests on the CPU, their CUDA path included: the dense check
// that reads a parameter after the step brings its digest (kernels::HealthCounts::word_sum), a
// fake device queue (fake_device_queue.h) finishing it when the test says so; what no dense check
// reads is summed by ATen. A step is recorded whole, in the model's order, or not at all.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "probes/core/session.h"
#include "probes/libtorch/device_checks.h"
#include "probes/libtorch/gradient_sentinel.h"
#include "tests/probes/fake_cuda.h"
#include "tests/probes/fake_device_queue.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::probes {
namespace {

using testing::fakeCuda;
using testing::FakeDevice;

class NoCalls final : public CheckedCallSink {
  void recordChecked(CallEvent, const RoleTensors&, const CallArgs&, const char*) override {}
};

// The dense check's counts of a clean tensor, with its words' sum where `word_sum` is given.
kernels::HealthCounts clean(std::optional<uint32_t> word_sum = std::nullopt) {
  kernels::HealthCounts c{};
  c.word_summed = word_sum.has_value();
  c.word_sum = word_sum.value_or(0);
  return c;
}

uint32_t wordsOf(const at::Tensor& cpu) {
  uint32_t sum = 0;
  for (int64_t b = 0; b < cpu.numel() * cpu.element_size(); b += 4) {
    uint32_t word;
    std::memcpy(&word, static_cast<const char*>(cpu.const_data_ptr()) + b, 4);
    sum += word;
  }
  return sum;
}

class SentinelDigests : public ::testing::Test {
 protected:
  SentinelDigests() {
    setenv("NANPROV_EXIT_WAIT_SECONDS", "0", 1);
    setenv("NANPROV_DEFER_CHECKS", "0", 1);
    checks_ = std::make_unique<DeviceChecks>(session_, *tracer_, calls_, fake_.factory());
    sentinel_ = std::make_unique<GradientSentinel>(session_, checks_->measured(),
                                                   [this](std::vector<ReplicaDigestRecord> rows) {
                                                     for (ReplicaDigestRecord& r : rows)
                                                       recorded_.push_back(std::move(r));
                                                   });
    // Two parameters on the (fake) GPU, read by the dense check; one on the CPU, summed by ATen.
    at::Tensor a = fakeCuda(a_, {8}), b = fakeCuda(b_, {2, 4});
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    a.mutable_grad() = fakeCuda(grad_a_, {8});
    b.mutable_grad() = fakeCuda(grad_b_, {2, 4});
    c_.mutable_grad() = at::zeros({6});
    params_ = {a, b, c_};
    sentinel_->watch(1, params_, "a\nb\nc", {}, {0, 1, 2}, {0, 1});
  }

  // The rows recorded for `step`, as "name=digest".
  std::vector<std::string> rowsOf(int64_t step) const {
    std::vector<std::string> out;
    for (const ReplicaDigestRecord& r : recorded_) {
      if (r.step == step) out.push_back(r.parameter + "=" + std::to_string(static_cast<uint32_t>(r.digest)));
    }
    return out;
  }
  std::string c() const { return "c=" + std::to_string(wordsOf(c_)); }

  Session session_;
  std::unique_ptr<KernelTracer> tracer_ = KernelTracer::create();
  NoCalls calls_;
  FakeDevice fake_;
  std::unique_ptr<DeviceChecks> checks_;
  std::unique_ptr<GradientSentinel> sentinel_;
  std::vector<ReplicaDigestRecord> recorded_;
  std::vector<float> a_ = std::vector<float>(8, 1.f), b_ = std::vector<float>(8, 2.f);
  std::vector<float> grad_a_ = std::vector<float>(8), grad_b_ = std::vector<float>(8);
  at::Tensor c_ = at::arange(6, at::kFloat).requires_grad_(true);
  std::vector<at::Tensor> params_;
};

TEST_F(SentinelDigests, TheDenseCheckBringsTheDigestsOfWhatItReadsAndTheStepIsRecordedWhole) {
  ASSERT_TRUE(sentinel_->check(1, 0, {}));
  ASSERT_EQ(fake_.launches().size(), 1u);
  EXPECT_EQ(fake_.launches()[0].kind, kernels::CheckKind::kDense);
  ASSERT_EQ(fake_.launches()[0].count, 4);  // a's gradient and value, b's: one launch, no reduction
  sentinel_->collectDigests(false);
  EXPECT_TRUE(recorded_.empty()) << "c's digest is in, a's and b's are not: nothing of the step yet";

  fake_.finish(0, {clean(), clean(0xdeadbeefu), clean(), clean(7u)});
  checks_->poll();
  sentinel_->collectDigests(false);
  EXPECT_EQ(rowsOf(0), (std::vector<std::string>{"a=" + std::to_string(0xdeadbeefu), "b=7", c()}));
}

TEST_F(SentinelDigests, AStepMissingADigestIsNotRecordedAndLaterStepsAre) {
  // Step 0: the check failed on the device (no counts). Step 1: measured, but without the words'
  // sum (as when the dense check failed to launch and the fused one measured it). Step 2: whole.
  for (int64_t step = 0; step < 3; ++step) ASSERT_TRUE(sentinel_->check(1, step, {}));
  ASSERT_EQ(fake_.launches().size(), 3u);
  fake_.finish(2, {clean(), clean(1u), clean(), clean(2u)});
  fake_.finish(1, {clean(), clean(), clean(), clean(2u)});
  fake_.finish(0, {});
  checks_->poll();
  sentinel_->collectDigests(false);
  EXPECT_TRUE(rowsOf(0).empty());
  EXPECT_TRUE(rowsOf(1).empty());
  EXPECT_EQ(rowsOf(2), (std::vector<std::string>{"a=1", "b=2", c()}));
}

TEST_F(SentinelDigests, AtExitAStepStillWaitingForItsCheckIsDroppedNotRecordedInPart) {
  ASSERT_TRUE(sentinel_->check(1, 0, {}));
  checks_->drain();  // the check never finished
  sentinel_->collectDigests(true);
  EXPECT_TRUE(recorded_.empty());
}

}  // namespace
}  // namespace nanprov::probes
