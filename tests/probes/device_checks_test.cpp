// DeviceChecks on the CPU, its CUDA path included: a fake DeviceQueue (fake_device_queue.h)
// finishes slots when the test says so, a fake CUDA device guard gives streams, and "CUDA"
// tensors are host memory the kernel never reads (nothing here runs an op on them).
#include "probes/libtorch/device_checks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "probes/core/session.h"
#include "tests/probes/device_checks_fixture.h"

namespace nanprov::probes {
namespace {

using testing::counts;
using testing::DeviceChecksTest;
using testing::fakeCuda;
using testing::FakeLaunch;
using testing::Recorded;

class Measured final : public MeasuredSink {
 public:
  std::vector<std::vector<MeasuredCounts>> received;
  std::vector<uint64_t> contexts;

 private:
  void measured(uint64_t context, const MeasuredCounts* counts, int n) override {
    contexts.push_back(context);
    received.emplace_back(counts, counts + n);
  }
};

TEST_F(DeviceChecksTest, ImmediateCheckIsRecordedOnceItsSlotFinished) {
  make("0");
  at::Tensor q = fakeCuda(q_, {2, 4}), k = fakeCuda(k_, {2, 4}), v = fakeCuda(v_, {2, 4});
  checks_->submit(call(0), qkv(q, k, v), {});
  ASSERT_EQ(fake_.launches().size(), 1u);
  EXPECT_EQ(fake_.launches()[0].count, 3);
  EXPECT_EQ(fake_.launches()[0].kind, kernels::CheckKind::kFused);
  checks_->poll();
  EXPECT_TRUE(sink_.records().empty());  // not finished: nothing waits for it

  fake_.finish(0, {counts(0, 1), counts(5, 2), counts(0, 3)});
  checks_->poll();
  const std::vector<Recorded> records = sink_.records();
  ASSERT_EQ(records.size(), 1u);
  ASSERT_EQ(records[0].rec.tensors.size(), 3u);
  EXPECT_EQ(records[0].rec.tensors[1].role, Role::kK);
  EXPECT_EQ(records[0].rec.tensors[1].nan, 5);
  EXPECT_EQ(records[0].rec.tensors[0].nan, 0);
  EXPECT_FLOAT_EQ(records[0].rec.tensors[2].max_abs, 3);
  EXPECT_EQ(records[0].held, 3u);     // its tensors held until then
  EXPECT_EQ(checks_->released(), 3);  // and released once recorded
  EXPECT_EQ(checks_->hostSyncs(), 0);
  EXPECT_EQ(checks_->firstDevice(), 0);
}

TEST_F(DeviceChecksTest, ACheckThatFailedOnTheDeviceRecordsNothing) {
  make("0");
  at::Tensor q = fakeCuda(q_, {2, 4}), k = fakeCuda(k_, {2, 4}), v = fakeCuda(v_, {2, 4});
  checks_->submit(call(0), qkv(q, k, v), {});
  fake_.finish(0, {});  // n = 0: the check failed
  checks_->poll();
  EXPECT_TRUE(sink_.records().empty());
  EXPECT_EQ(checks_->released(), 3);
}

TEST_F(DeviceChecksTest, DeferredCpuBatchLeavesOutATensorChangedBeforeItsCheck) {
  make("2");
  ASSERT_EQ(checks_->deferMode(), 2);
  at::Tensor q = at::ones({2, 4}), k = at::ones({2, 4}), v = at::ones({2, 4});
  checks_->submitHost(call(-1), qkv(q, k, v), {});
  EXPECT_TRUE(sink_.records().empty());  // waiting in this thread's batch
  k.mul_(2);                             // changed in place before the check
  const int64_t unprobed = Session::unprobedCountedOnThread();
  checks_->poll();
  std::vector<Recorded> records = sink_.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].rec.modified_roles, 1u << static_cast<int>(Role::kK));
  ASSERT_EQ(records[0].rec.tensors.size(), 2u);  // judged on the rest
  EXPECT_EQ(records[0].rec.tensors[0].role, Role::kQ);
  EXPECT_EQ(records[0].rec.tensors[1].role, Role::kV);
  EXPECT_EQ(Session::unprobedCountedOnThread(), unprobed + 1);
  DeferStats stats = checks_->deferStats();
  EXPECT_EQ(stats.deferred, 1);
  EXPECT_EQ(stats.modified, 1);

  // Its signature is checked at once from then on; another layer's still waits.
  checks_->submitHost(call(-1), qkv(q, k, v), {});
  EXPECT_EQ(sink_.records().size(), 2u);
  EXPECT_EQ(sink_.records()[1].rec.modified_roles, 0u);
  checks_->submitHost(call(-1, 1), qkv(q, k, v), {});
  EXPECT_EQ(sink_.records().size(), 2u);
  checks_->poll();
  EXPECT_EQ(sink_.records().size(), 3u);
  stats = checks_->deferStats();
  EXPECT_EQ(stats.immediate_fallbacks, 1);
  EXPECT_EQ(stats.deferred, 2);
}

TEST_F(DeviceChecksTest, DeferredCudaBatchLaunchesOnceWithoutTheChangedTensor) {
  make("1");
  at::Tensor q = fakeCuda(q_, {2, 4}), k = fakeCuda(k_, {2, 4}), v = fakeCuda(v_, {2, 4});
  checks_->submit(call(0, 0), qkv(q, k, v), {});
  checks_->submit(call(0, 1), qkv(q, k, v), {});
  EXPECT_TRUE(fake_.launches().empty());  // both in the batch
  v.unsafeGetTensorImpl()->bump_version();
  checks_->poll();  // the step boundary: one launch for the batch, v left out of both calls
  ASSERT_EQ(fake_.launches().size(), 1u);
  EXPECT_EQ(fake_.launches()[0].count, 4);
  fake_.finish(0, {counts(0, 1), counts(0, 1), counts(7, 1), counts(0, 1)});
  checks_->poll();
  const std::vector<Recorded> records = sink_.records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].rec.layer, 0);
  EXPECT_EQ(records[0].rec.tensors.size(), 2u);
  EXPECT_EQ(records[0].rec.modified_roles, 1u << static_cast<int>(Role::kV));
  EXPECT_EQ(records[1].rec.tensors[0].nan, 7);  // the second call's slice of the results
  const DeferStats stats = checks_->deferStats();
  EXPECT_EQ(stats.batched_launches, 1);
  EXPECT_EQ(stats.modified, 2);
}

TEST_F(DeviceChecksTest, MeasuringDenseFusedAndHost) {
  make("0");
  MeasuredChecks& measured = checks_->measured();
  Measured sink;
  // Dense: contiguous float tensors, one dense launch on the lane's second queue.
  at::Tensor a = fakeCuda(q_, {8}), b = fakeCuda(k_, {2, 4});
  EXPECT_TRUE(MeasuredChecks::denseCheckable(a));
  EXPECT_EQ(measured.denseBatch(0), MeasuredChecks::kMaxMeasuredDense);
  ASSERT_TRUE(measured.measure({a, b}, sink, 11));
  ASSERT_EQ(fake_.launches().size(), 1u);
  EXPECT_EQ(fake_.launches()[0].kind, kernels::CheckKind::kDense);
  EXPECT_EQ(fake_.launches()[0].count, 2);
  EXPECT_EQ(checks_->denseLaunches(), 1);

  // Fused: a strided tensor no dense check reads.
  at::Tensor strided = fakeCuda(v_, {2, 2}, {4, 1});
  EXPECT_FALSE(MeasuredChecks::denseCheckable(strided));
  ASSERT_TRUE(measured.measure({strided}, sink, 12));
  ASSERT_EQ(fake_.launches().size(), 2u);
  EXPECT_EQ(fake_.launches()[1].kind, kernels::CheckKind::kFused);
  EXPECT_EQ(checks_->measuredFusedLaunches(), 1);
  EXPECT_TRUE(sink.received.empty());

  fake_.finish(1, {counts(3, 4)});
  fake_.finish(0, {counts(1, 2), counts(0, 5)});
  checks_->poll();
  ASSERT_EQ(sink.received.size(), 2u);
  EXPECT_EQ(sink.contexts[0], 12u);  // the fused queue is collected first
  EXPECT_EQ(sink.received[0][0].nan, 3);
  EXPECT_EQ(sink.contexts[1], 11u);
  ASSERT_EQ(sink.received[1].size(), 2u);
  EXPECT_EQ(sink.received[1][0].nan, 1);
  EXPECT_DOUBLE_EQ(sink.received[1][1].max_abs, 5);

  // Host: CPU tensors, handed over before measure returns, each a counted host sync.
  at::Tensor cpu = at::tensor({1.0f, std::numeric_limits<float>::infinity(), -3.0f});
  ASSERT_TRUE(measured.measure({cpu}, sink, 13));
  ASSERT_EQ(sink.received.size(), 3u);
  EXPECT_EQ(sink.received[2][0].posinf, 1);
  EXPECT_DOUBLE_EQ(sink.received[2][0].max_abs, 3);
  EXPECT_EQ(checks_->hostSyncs(), 1);
  EXPECT_EQ(fake_.launches().size(), 2u);
}

TEST_F(DeviceChecksTest, DrainRecordsWhatFinishedAndDropsTheRest) {
  make("0");
  at::Tensor q = fakeCuda(q_, {2, 4}), k = fakeCuda(k_, {2, 4}), v = fakeCuda(v_, {2, 4});
  checks_->submit(call(0, 0), qkv(q, k, v), {});
  checks_->submit(call(0, 1), qkv(q, k, v), {});
  checks_->submit(call(0, 2), qkv(q, k, v), {});
  ASSERT_EQ(fake_.launches().size(), 3u);
  fake_.finishClean(1);
  checks_->drain();
  const std::vector<Recorded> records = sink_.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].rec.layer, 1);
  for (const FakeLaunch& l : fake_.launches()) EXPECT_TRUE(l.handed);
}

TEST_F(DeviceChecksTest, ALaneIsAdoptedOnceItsThreadEnded) {
  make("0");
  at::Tensor q = fakeCuda(q_, {2, 4}), k = fakeCuda(k_, {2, 4}), v = fakeCuda(v_, {2, 4});
  std::thread([&] { checks_->submit(call(0), qkv(q, k, v), {}); }).join();
  EXPECT_EQ(fake_.queuesMade(), 1);
  checks_->submit(call(0), qkv(q, k, v), {});  // the ended thread's lane, adopted
  EXPECT_EQ(fake_.queuesMade(), 1);
  std::thread([&] { checks_->submit(call(0), qkv(q, k, v), {}); }).join();  // this thread owns it: a new one
  EXPECT_EQ(fake_.queuesMade(), 2);
  ASSERT_EQ(fake_.launches().size(), 3u);
  for (size_t i = 0; i < 3; ++i) fake_.finishClean(i);
  checks_->poll();  // any thread collects every lane
  EXPECT_EQ(sink_.records().size(), 3u);
}

}  // namespace
}  // namespace nanprov::probes
