// Each layer's trend through the writer (store/trend_keeper.h): a run of any length keeps a few
// hundred rows per layer, their maxima exact, and the warnings it raised reach the sink once,
// after they are in the store.
#include "store/trend_keeper.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "store/reader.h"
#include "store/run_dir.h"
#include "store/writer.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
namespace {
namespace fs = std::filesystem;

CallRecord callOf(int64_t seq, int64_t step, int layer, Phase phase, double lse) {
  CallRecord c;
  c.seq = seq;
  c.step = step;
  c.layer = layer;
  c.phase = phase;
  c.op = "aten::_scaled_dot_product_flash_attention_for_cpu";
  c.backend = "flash_cpu";
  c.module = "layers." + std::to_string(layer) + ".attn";
  c.device = Device::cpu();
  const TensorShape shape = *TensorShape::parse("[2,4,8,16]");
  const DtypeName float32 = DtypeName::intern("Float");
  if (phase == Phase::kForward) {
    c.tensors = {
        {.role = Role::kO, .dtype = float32, .shape = shape, .numel = 1024, .max_abs = 1.0},
        {.role = Role::kLSE, .dtype = float32, .shape = *TensorShape::parse("[2,4,8]"), .numel = 64, .max_abs = lse}};
  } else {
    c.tensors = {{.role = Role::kdQ, .dtype = float32, .shape = shape, .numel = 1024, .max_abs = 0.5}};
  }
  return c;
}

// The live line says how many steps before the NaN its warning came (issue 61): when the rank's
// values first go non-finite, the first warning handed out is handed again with that step, once;
// a warning raised after them carries it at once.
TEST(TrendKeeper, TheFirstWarningIsHandedAgainWhenTheValuesGoNonFinite) {
  TrendKeeper keeper;
  EXPECT_TRUE(keeper.noteCall(callOf(0, 0, 0, Phase::kForward, 3.5)).empty());
  auto w = keeper.noteCall(callOf(1, 4, 0, Phase::kForward, 2000));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_FALSE(w[0].nonfinite_step);
  auto again = keeper.noteNonFinite(9);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].step, 4);
  EXPECT_EQ(again[0].nonfinite_step, 9);
  EXPECT_TRUE(keeper.noteNonFinite(10).empty()) << "once";
  EXPECT_TRUE(keeper.noteCall(callOf(2, 12, 1, Phase::kForward, 3.5)).empty());
  auto late = keeper.noteCall(callOf(3, 13, 1, Phase::kForward, 5000));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].nonfinite_step, 9);
}

TEST(TrendKeeper, ALongRunKeepsAFewHundredRowsPerLayerWithExactMaxima) {
  fs::path dir = testing::freshDir("trend_long");
  std::vector<TrendWarning> heard;
  // Layer 1's logit grows from step 3000: 3.5 before, then 3.5 + (step - 2999).
  auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}}, 0,
                                  [&](const TrendWarning& w) { heard.push_back(w); });
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  const int64_t steps = 4000;
  int64_t seq = 0;
  for (int64_t step = 0; step < steps; ++step) {
    for (int layer = 0; layer < 2; ++layer) {
      const double lse = layer == 1 && step >= 3000 ? 3.5 + static_cast<double>(step - 2999) : 3.5;
      (*writer)->append(callOf(seq++, step, layer, Phase::kForward, lse));
      (*writer)->append(callOf(seq++, step, layer, Phase::kBackward, 0));
    }
    (*writer)->stepEnded(step, 1000 + seq);
    if (step % 500 == 0) {
      while ((*writer)->pendingCalls() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  ASSERT_TRUE((*writer)->close().ok());

  auto run = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  const RankInfo& rank = run->ranks.at(0);
  ASSERT_FALSE(rank.trends.empty());
  std::map<int64_t, int> rows;
  int64_t calls = 0;
  double largest = 0;
  for (const TrendPoint& p : rank.trends) {
    ++rows[p.layer];
    calls += p.calls;
    EXPECT_EQ(p.bucket_steps, 16) << "4,000 steps at most 256 buckets a layer: 16 steps a bucket";
    EXPECT_EQ(p.step % 16, 0) << "buckets are aligned";
    if (p.layer == 1) largest = std::max(largest, p.logit.value_or(0));
    EXPECT_EQ(p.dq, 0.5);
    EXPECT_EQ(p.o, 1.0);
  }
  EXPECT_EQ(calls, seq) << "every call counted in some bucket";
  EXPECT_LE(rows[0], 256);
  EXPECT_LE(rows[1], 256);
  EXPECT_EQ(largest, 3.5 + 1000) << "the maxima survive the merges";

  // Layer 1 crossed 1,000 (and x10 of 3.5) at step 2999 + 997.
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].layer, 1);
  EXPECT_EQ(heard[0].step, 2999 + 997);
  EXPECT_EQ(heard[0].module, "layers.1.attn");
  ASSERT_EQ(rank.trend_warnings.size(), 1u);
  EXPECT_EQ(rank.trend_warnings[0].step, heard[0].step);
  EXPECT_EQ(rank.trend_warnings[0].from_value, 3.5);
}

}  // namespace
}  // namespace nanprov::store
