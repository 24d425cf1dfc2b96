#include "probes/core/call_identity.h"

#include <gtest/gtest.h>

#include <set>

namespace nanprov::probes {
namespace {

ForwardSite at(const std::string& module) { return ForwardSite{module, false, true}; }
ForwardSite recomputing(const std::string& module) { return ForwardSite{module, true, true}; }
ForwardSite inference(const std::string& module) { return ForwardSite{module, false, false}; }

TEST(CallIdentity, LayerComesFromTheModulePath) {
  EXPECT_EQ(layerFromModulePath("model.layers.33.self_attn"), 33);
  EXPECT_EQ(layerFromModulePath("module.blocks.2.attn"), 2);
  EXPECT_EQ(layerFromModulePath("encoder.attn"), -1);
  EXPECT_EQ(layerFromModulePath(""), -1);
  EXPECT_EQ(layerFromModulePath("a.1.b.7"), -1) << "two numbers: neither names the module";
}

TEST(CallIdentity, ForwardAndBackwardEachCountPerLayer) {
  CallIdentity ids;
  CallName f0 = ids.forward(at("layers.0.attn"), 0xA0);
  CallName f1 = ids.forward(at("layers.1.attn"), 0xA1);
  CallName b1 = ids.backward(0xA1);
  CallName b0 = ids.backward(0xA0);
  EXPECT_EQ(f0.call, 0);
  EXPECT_EQ(b0.call, 1);
  EXPECT_EQ(b1.layer, 1);
  EXPECT_EQ(b1.fwd_seq, f1.seq);
  EXPECT_EQ(b0.module, "layers.0.attn");
  EXPECT_EQ(b0.seq, 3);
  ASSERT_TRUE(ids.stepEnded(1));
  CallName f0s1 = ids.forward(at("layers.0.attn"), 0xA0);
  EXPECT_EQ(f0s1.step, 1);
  EXPECT_EQ(f0s1.call, 2);  // call 45 at step 22 is the backward of layer 33 in the seeds' naming
}

TEST(CallIdentity, WithoutAPathTheLayerIsTheOrdinalInTheStep) {
  CallIdentity ids;
  EXPECT_EQ(ids.forward(at(""), 1).layer, 0);
  EXPECT_EQ(ids.forward(at(""), 2).layer, 1);
  ids.stepEnded(1);
  EXPECT_EQ(ids.forward(at(""), 3).layer, 0);
}

TEST(CallIdentity, NestedPathsGetOneDistinctLayerEach) {
  CallIdentity ids;
  std::set<int64_t> layers;
  for (int stage = 0; stage < 2; ++stage) {
    for (int block = 0; block < 4; ++block) {
      std::string path = "stages." + std::to_string(stage) + ".blocks." + std::to_string(block) + ".attn";
      layers.insert(ids.forward(at(path)).layer);
    }
  }
  EXPECT_EQ(layers.size(), 8u);
  ids.stepEnded(1);
  EXPECT_EQ(ids.forward(at("stages.1.blocks.2.attn")).layer, 6) << "a module keeps its number";
}

TEST(CallIdentity, TwoModulesSpellingTheSameNumberDoNotShareIt) {
  CallIdentity ids;
  EXPECT_EQ(ids.forward(at("encoder.layers.0.attn")).layer, 0);
  EXPECT_EQ(ids.forward(at("encoder.layers.1.attn")).layer, 1);
  int64_t decoder0 = ids.forward(at("decoder.layers.0.attn")).layer;
  EXPECT_NE(decoder0, 0);
  EXPECT_NE(decoder0, 1);
}

TEST(CallIdentity, ACheckpointRecomputeIsTheOriginalCallAgain) {
  CallIdentity ids;
  CallName f0 = ids.forward(at("stack.0.attention"), 0xA0);
  CallName f1 = ids.forward(at("stack.1.attention"), 0xA1);
  // Backward runs layer 1 first: its forward is recomputed, then differentiated.
  CallName r1 = ids.forward(recomputing("stack.1.attention"), 0xB1);
  CallName b1 = ids.backward(0xB1);
  CallName r0 = ids.forward(recomputing("stack.0.attention"), 0xB0);
  CallName b0 = ids.backward(0xB0);
  EXPECT_TRUE(r1.recompute);
  EXPECT_FALSE(f1.recompute);
  EXPECT_EQ(r1.layer, f1.layer);
  EXPECT_EQ(r1.call, f1.call);
  EXPECT_EQ(r1.step, f1.step);
  EXPECT_EQ(r1.fwd_seq, f1.seq);
  EXPECT_NE(r1.seq, f1.seq);
  EXPECT_EQ(b1.layer, 1);
  EXPECT_EQ(b1.call, 1) << "the recompute takes no call number of its own";
  EXPECT_EQ(b1.fwd_seq, r1.seq);
  EXPECT_EQ(r0.fwd_seq, f0.seq);
  EXPECT_EQ(b0.module, "stack.0.attention");
}

TEST(CallIdentity, RecomputesOfMicroBatchesMatchTheirOwnForward) {
  CallIdentity ids;
  CallName a = ids.forward(at("layers.0.attn"));
  CallName ra = ids.forward(recomputing("layers.0.attn"));
  CallName b = ids.forward(at("layers.0.attn"));
  CallName rb = ids.forward(recomputing("layers.0.attn"));
  EXPECT_EQ(ra.fwd_seq, a.seq);
  EXPECT_EQ(rb.fwd_seq, b.seq);
}

TEST(CallIdentity, InferenceCountsForwardPasses) {
  CallIdentity ids;
  EXPECT_EQ(ids.forward(inference("layers.0.attn")).step, 0);
  EXPECT_EQ(ids.forward(inference("layers.1.attn")).step, 0);
  CallName next = ids.forward(inference("layers.0.attn"));
  EXPECT_EQ(next.step, 1);
  EXPECT_TRUE(next.opened_step);
  EXPECT_EQ(next.call, 1);
  EXPECT_EQ(ids.forward(inference("layers.1.attn")).step, 1);
  EXPECT_EQ(ids.stepUnit(), StepUnit::kForwardPass);
  // Training that starts afterwards counts on from there.
  ASSERT_TRUE(ids.stepEnded(1));
  EXPECT_EQ(ids.stepUnit(), StepUnit::kOptimizerStep);
  EXPECT_EQ(ids.step(), 2);
}

TEST(CallIdentity, TrainingForwardsDoNotCountAsPasses) {
  CallIdentity ids;
  ids.forward(at("layers.0.attn"));
  CallName again = ids.forward(at("layers.0.attn"));  // a second micro-batch
  EXPECT_EQ(again.step, 0);
  EXPECT_FALSE(again.opened_step);
  EXPECT_EQ(ids.stepUnit(), StepUnit::kOptimizerStep);
}

TEST(CallIdentity, CompiledForwardsWithoutTheirBackwardAreCounted) {
  CallIdentity ids;
  ForwardSite compiled{"layers.0.attn", false, true, true};
  ids.forward(compiled, 0xA0);
  ids.forward(ForwardSite{"layers.1.attn", false, true, true}, 0xA1);
  ids.backward(0xA1);
  ids.forward(at("layers.2.attn"), 0xA2);  // eager: a missing backward is not this signal's business
  ids.stepEnded(1);
  EXPECT_EQ(ids.takeUnseenCompiledBackwards(), 1);
  EXPECT_EQ(ids.takeUnseenCompiledBackwards(), 0) << "taken once";
  ids.forward(compiled, 0xB0);
  ids.runEnded();
  EXPECT_EQ(ids.takeUnseenCompiledBackwards(), 1);
}

TEST(CallIdentity, UnlinkedBackwardKeepsLayerUnknown) {
  CallIdentity ids;
  CallName b = ids.backward(0xDEAD);
  EXPECT_EQ(b.layer, -1);
  EXPECT_EQ(b.fwd_seq, -1);
  EXPECT_FALSE(ids.stepEnded(0)) << "a step count that is not new changes nothing";
}

}  // namespace
}  // namespace nanprov::probes
