// A backward does not read again what its forward's check read (ForwardChecks, issue 66): on the
// CPU, its CUDA path through a fake device queue, and its host path with real values. The edge
// rule must stay exact: every inherited count equals what a read of the tensor gives, anything
// changed since the forward is read again, and outputs are always read.
#include "probes/libtorch/forward_checks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "tests/probes/device_checks_fixture.h"

namespace nanprov::probes {
namespace {

using testing::counts;
using testing::fakeCuda;
using testing::Recorded;

class ForwardChecksTest : public testing::DeviceChecksTest {
 protected:
  static constexpr int64_t kForwardSeq = 5;

  CallEvent forward(int device) {
    CallEvent rec = call(device);
    rec.seq = kForwardSeq;
    return rec;
  }
  CallEvent backward(int device) {
    CallEvent rec = call(device);
    rec.op = "aten::_scaled_dot_product_flash_attention_backward";
    rec.phase = Phase::kBackward;
    rec.seq = kForwardSeq + 1;
    rec.fwd_seq = kForwardSeq;
    return rec;
  }
  RoleTensors forwardTensors() {
    RoleTensors t = qkv(q, k, v);
    t.emplace_back(Role::kO, o);
    return t;
  }
  // SDPA's backward: dO, then what the forward saved, then the gradients.
  RoleTensors backwardTensors() {
    RoleTensors t;
    t.emplace_back(Role::kdO, d_o);
    for (const auto& [role, tensor] : forwardTensors()) t.emplace_back(role, tensor);
    t.emplace_back(Role::kdQ, dq);
    t.emplace_back(Role::kdK, dk);
    t.emplace_back(Role::kdV, dv);
    return t;
  }
  void fakeTensors() {
    q = fakeCuda(q_, {2, 4}), k = fakeCuda(k_, {2, 4}), v = fakeCuda(v_, {2, 4}), o = fakeCuda(o_, {2, 4});
    d_o = fakeCuda(do_, {2, 4}), dq = fakeCuda(dq_, {2, 4}), dk = fakeCuda(dk_, {2, 4}), dv = fakeCuda(dv_, {2, 4});
  }
  // The forward's counts: Q, K, V clean, each with its own largest |x|; O with 3 NaNs.
  void finishForward(size_t launch) {
    fake_.finish(launch, {counts(0, 1.5f), counts(0, 2.5f), counts(0, 3.5f), counts(3, 4.5f)});
  }

  std::vector<float> o_ = std::vector<float>(8), do_ = std::vector<float>(8), dq_ = std::vector<float>(8),
                     dk_ = std::vector<float>(8), dv_ = std::vector<float>(8);
  at::Tensor q, k, v, o, d_o, dq, dk, dv;
};

// The backward's record, with its tensors by role.
const TensorHealth& tensorOf(const Recorded& r, Role role) {
  for (const TensorHealth& h : r.rec.tensors) {
    if (h.role == role) return h;
  }
  ADD_FAILURE() << "no " << roleName(role);
  static const TensorHealth none;
  return none;
}

const Recorded* backwardIn(const std::vector<Recorded>& records) {
  for (const Recorded& r : records) {
    if (r.rec.phase == Phase::kBackward) return &r;
  }
  return nullptr;
}

TEST_F(ForwardChecksTest, BackwardReadsOnlyWhatItsForwardDidNot) {
  make("0");
  fakeTensors();
  checks_->submit(forward(0), forwardTensors(), {});
  finishForward(0);
  checks_->poll();
  checks_->submit(backward(0), backwardTensors(), {});
  ASSERT_EQ(fake_.launches().size(), 2u);
  EXPECT_EQ(fake_.launches()[1].count, 4);  // dO, dQ, dK, dV: Q, K, V and O were read by the forward
  fake_.finish(1, {counts(0, 1), counts(0, 1), counts(0, 1), counts(6, 1)});
  checks_->poll();

  const std::vector<Recorded> records = sink_.records();
  ASSERT_EQ(records.size(), 2u);
  const Recorded* bwd = backwardIn(records);
  ASSERT_NE(bwd, nullptr);
  ASSERT_EQ(bwd->rec.tensors.size(), 8u);  // every role recorded, in the call's order
  EXPECT_EQ(bwd->rec.tensors[1].role, Role::kQ);
  EXPECT_FLOAT_EQ(tensorOf(*bwd, Role::kQ).max_abs, 1.5);
  EXPECT_FLOAT_EQ(tensorOf(*bwd, Role::kV).max_abs, 3.5);
  EXPECT_EQ(tensorOf(*bwd, Role::kO).nan, 3);  // the forward's NaNs: not an edge of the backward
  EXPECT_EQ(tensorOf(*bwd, Role::kdV).nan, 6);
  EXPECT_EQ(tensorOf(*bwd, Role::kO).shape, tensorOf(records[0], Role::kO).shape);
  EXPECT_EQ(bwd->held, 8u);
  EXPECT_EQ(checks_->inherited(), 4);
}

TEST_F(ForwardChecksTest, BackwardFinishedFirstWaitsForItsForwardsCounts) {
  make("0");
  fakeTensors();
  checks_->submit(forward(0), forwardTensors(), {});
  checks_->submit(backward(0), backwardTensors(), {});
  EXPECT_EQ(fake_.launches()[1].count, 4);
  fake_.finishClean(1);  // the backward's check is back; its forward's is not
  checks_->poll();
  EXPECT_TRUE(sink_.records().empty());
  EXPECT_EQ(checks_->released(), 0);  // its tensors still held

  finishForward(0);
  checks_->poll();
  const std::vector<Recorded> records = sink_.records();
  ASSERT_EQ(records.size(), 2u);
  const Recorded* bwd = backwardIn(records);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(tensorOf(*bwd, Role::kO).nan, 3);
  EXPECT_FLOAT_EQ(tensorOf(*bwd, Role::kK).max_abs, 2.5);
  EXPECT_EQ(checks_->released(), 12);
}

TEST_F(ForwardChecksTest, ATensorChangedSinceItsForwardIsReadAgain) {
  make("0");
  fakeTensors();
  checks_->submit(forward(0), forwardTensors(), {});
  finishForward(0);
  checks_->poll();
  k.unsafeGetTensorImpl()->bump_version();  // an in-place write between forward and backward
  checks_->submit(backward(0), backwardTensors(), {});
  EXPECT_EQ(fake_.launches()[1].count, 5);  // dO, K, dQ, dK, dV
  fake_.finish(1, {counts(0, 1), counts(9, 7), counts(0, 1), counts(0, 1), counts(0, 1)});
  checks_->poll();
  const Recorded* bwd = backwardIn(sink_.records());
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(tensorOf(*bwd, Role::kK).nan, 9);  // as read now, not as the forward found it
  EXPECT_FLOAT_EQ(tensorOf(*bwd, Role::kQ).max_abs, 1.5);
  EXPECT_EQ(checks_->inherited(), 3);
}

TEST_F(ForwardChecksTest, AnotherForwardsTensorsOrACompiledBackwardReadEverything) {
  make("0");
  fakeTensors();
  checks_->submit(forward(0), forwardTensors(), {});
  finishForward(0);
  checks_->poll();
  CallEvent other = backward(0);
  other.fwd_seq = kForwardSeq + 100;  // the same tensors, another forward's backward
  checks_->submit(other, backwardTensors(), {});
  CallEvent compiled = backward(0);
  compiled.compiled = true;  // Inductor writes buffers without moving version counters
  checks_->submit(compiled, backwardTensors(), {});
  ASSERT_EQ(fake_.launches().size(), 3u);
  EXPECT_EQ(fake_.launches()[1].count, 8);
  EXPECT_EQ(fake_.launches()[2].count, 8);
  EXPECT_EQ(checks_->inherited(), 0);
}

// Activation checkpointing: the original forward's tensors were freed, and the backward links to
// the recompute (CallIdentity gives it the recompute's seq as its fwd_seq).
TEST_F(ForwardChecksTest, ARecomputedForwardServesItsBackward) {
  make("0");
  fakeTensors();
  checks_->submit(forward(0), forwardTensors(), {});  // the original, checked at its own seq
  finishForward(0);
  CallEvent recompute = call(0);
  recompute.seq = kForwardSeq + 40;
  recompute.fwd_seq = kForwardSeq;
  recompute.recompute = true;
  checks_->submit(recompute, forwardTensors(), {});
  finishForward(1);
  checks_->poll();
  CallEvent its_backward = backward(0);
  its_backward.fwd_seq = recompute.seq;
  checks_->submit(its_backward, backwardTensors(), {});
  EXPECT_EQ(fake_.launches()[2].count, 4);
}

TEST_F(ForwardChecksTest, AForwardWhoseCheckFailedIsNotInherited) {
  make("0");
  fakeTensors();
  // Failed before its backward came: the backward reads everything itself.
  checks_->submit(forward(0), forwardTensors(), {});
  fake_.finish(0, {});
  checks_->poll();
  checks_->submit(backward(0), backwardTensors(), {});
  EXPECT_EQ(fake_.launches()[1].count, 8);
  fake_.finishClean(1);
  checks_->poll();
  ASSERT_EQ(sink_.records().size(), 1u);  // the forward is not recorded, the backward is

  // Failed after its backward took its counts: the backward is not recorded either, as a failed
  // check of its own would not be, and its tensors are released.
  CallEvent second = forward(0);
  second.seq = kForwardSeq + 2;
  checks_->submit(second, forwardTensors(), {});
  CallEvent its_backward = backward(0);
  its_backward.fwd_seq = second.seq;
  checks_->submit(its_backward, backwardTensors(), {});
  EXPECT_EQ(fake_.launches()[3].count, 4);
  fake_.finishClean(3);
  checks_->poll();
  fake_.finish(2, {});
  checks_->poll();
  EXPECT_EQ(sink_.records().size(), 1u);
  EXPECT_EQ(checks_->released(), 4 + 8 + 4 + 8);
}

TEST_F(ForwardChecksTest, ExitDropsABackwardWhoseForwardNeverFinished) {
  make("0");
  fakeTensors();
  checks_->submit(forward(0), forwardTensors(), {});
  checks_->submit(backward(0), backwardTensors(), {});
  fake_.finishClean(1);
  checks_->poll();
  checks_->drain();  // the forward's check never finished: neither call is recorded
  EXPECT_TRUE(sink_.records().empty());
  EXPECT_EQ(checks_->released(), 12);
  EXPECT_EQ(checks_->inherited(), 0);  // counted only where recorded
}

// The host path with real values: the inherited counts are what measuring the tensor gives.
TEST_F(ForwardChecksTest, OnTheHostInheritedCountsEqualAFreshMeasure) {
  make("0");
  q = at::randn({2, 3, 8, 4}), k = at::randn({2, 3, 8, 4}), v = at::randn({2, 3, 8, 4});
  o = at::randn({2, 3, 8, 4});
  o.index_put_({0, 1, 2}, std::numeric_limits<float>::quiet_NaN());  // the forward's output went NaN
  d_o = at::randn({2, 3, 8, 4}), dq = at::randn({2, 3, 8, 4}), dk = at::randn({2, 3, 8, 4});
  dv = at::randn({2, 3, 8, 4});
  checks_->submitHost(forward(-1), forwardTensors(), {});
  q.mul_(4);  // changed in place since the forward: measured again
  checks_->submitHost(backward(-1), backwardTensors(), {});
  EXPECT_EQ(checks_->inherited(), 3);  // K, V, O

  const Recorded* bwd = backwardIn(sink_.records());
  ASSERT_NE(bwd, nullptr);
  const RoleTensors tensors = backwardTensors();
  ASSERT_EQ(bwd->rec.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorHealth fresh = measureTensor(tensors[i].second, tensors[i].first);
    const TensorHealth& got = bwd->rec.tensors[i];
    SCOPED_TRACE(roleName(tensors[i].first));
    EXPECT_EQ(got.nan, fresh.nan);
    EXPECT_EQ(got.posinf + got.neginf, fresh.posinf + fresh.neginf);
    EXPECT_DOUBLE_EQ(got.max_abs, fresh.max_abs);
    EXPECT_EQ(got.all_zero, fresh.all_zero);
    EXPECT_EQ(got.numel, fresh.numel);
  }
  EXPECT_EQ(tensorOf(*bwd, Role::kO).nan, 4);  // the row of 4 set to NaN
}

// The table alone: what it holds, and what lets a backward stop waiting.
class ForwardChecksTable : public ::testing::Test {
 protected:
  CallEvent forwardAt(int64_t seq) {
    CallEvent rec;
    rec.seq = seq;
    return rec;
  }
  CallEvent backwardOf(int64_t fwd_seq) {
    CallEvent rec;
    rec.phase = Phase::kBackward;
    rec.seq = fwd_seq + 1;
    rec.fwd_seq = fwd_seq;
    return rec;
  }
  RoleTensors justQ() {
    RoleTensors t;
    t.emplace_back(Role::kQ, q);
    return t;
  }
  at::Tensor q = at::ones({2, 4});
  InlineVector<uint8_t, kMaxCallTensors> first{0};
};

TEST_F(ForwardChecksTable, AForwardDroppedWithoutItsCountsFailsTheBackwardWaitingForThem) {
  ForwardChecks table;
  InheritedTensors waiting;
  {
    ForwardCountsRef counts = table.remember(forwardAt(5), justQ(), first);
    ASSERT_TRUE(counts);
    waiting = table.inherit(backwardOf(5), justQ());
    ASSERT_FALSE(waiting.empty());
    EXPECT_EQ(waiting.forward->state(), ForwardCounts::State::kPending);
  }  // the forward's check never filled them (dropped on the way)
  EXPECT_EQ(waiting.forward->state(), ForwardCounts::State::kFailed);
  EXPECT_TRUE(table.inherit(backwardOf(5), justQ()).empty());  // and no later backward takes them
}

TEST_F(ForwardChecksTable, AHeldSlotIsNotTakenByANewerForward) {
  ForwardChecks table;
  ForwardCountsRef held = table.remember(forwardAt(5), justQ(), first);
  ASSERT_TRUE(held);
  // The same slot (seq modulo the table's size) while the first forward's check is in flight.
  EXPECT_FALSE(table.remember(forwardAt(5 + ForwardChecks::kSlots), justQ(), first));
  held->fill(CallTensors{TensorHealth{}});
  held.reset();
  EXPECT_TRUE(table.remember(forwardAt(5 + ForwardChecks::kSlots), justQ(), first));
  EXPECT_TRUE(table.inherit(backwardOf(5), justQ()).empty());  // the older forward is gone
}

}  // namespace
}  // namespace nanprov::probes
