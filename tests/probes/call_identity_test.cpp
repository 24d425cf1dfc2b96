#include "probes/call_identity.h"

#include <gtest/gtest.h>

namespace nanprov {
namespace {

TEST(CallIdentity, LayerComesFromTheModulePath) {
  EXPECT_EQ(layerFromModulePath("model.layers.33.self_attn"), 33);
  EXPECT_EQ(layerFromModulePath("module.blocks.2.attn"), 2);
  EXPECT_EQ(layerFromModulePath("encoder.attn"), -1);
  EXPECT_EQ(layerFromModulePath(""), -1);
  EXPECT_EQ(layerFromModulePath("a.1.b.7"), 7);
}

TEST(CallIdentity, ForwardAndBackwardEachCountPerLayer) {
  CallIdentity ids;
  CallName f0 = ids.forward("layers.0.attn", 0xA0);
  CallName f1 = ids.forward("layers.1.attn", 0xA1);
  CallName b1 = ids.backward(0xA1);
  CallName b0 = ids.backward(0xA0);
  EXPECT_EQ(f0.call, 0);
  EXPECT_EQ(b0.call, 1);
  EXPECT_EQ(b1.layer, 1);
  EXPECT_EQ(b1.fwd_seq, f1.seq);
  EXPECT_EQ(b0.module, "layers.0.attn");
  EXPECT_EQ(b0.seq, 3);
  ASSERT_TRUE(ids.stepEnded(1));
  CallName f0s1 = ids.forward("layers.0.attn", 0xA0);
  EXPECT_EQ(f0s1.step, 1);
  EXPECT_EQ(f0s1.call, 2);  // call 45 at step 22 is the backward of layer 33 in the seeds' naming
}

TEST(CallIdentity, WithoutAPathTheLayerIsTheOrdinalInTheStep) {
  CallIdentity ids;
  EXPECT_EQ(ids.forward("", 1).layer, 0);
  EXPECT_EQ(ids.forward("", 2).layer, 1);
  ids.stepEnded(1);
  EXPECT_EQ(ids.forward("", 3).layer, 0);
}

TEST(CallIdentity, UnlinkedBackwardKeepsLayerUnknown) {
  CallIdentity ids;
  CallName b = ids.backward(0xDEAD);
  EXPECT_EQ(b.layer, -1);
  EXPECT_EQ(b.fwd_seq, -1);
  EXPECT_FALSE(ids.stepEnded(0)) << "a step count that is not new changes nothing";
}

}  // namespace
}  // namespace nanprov
