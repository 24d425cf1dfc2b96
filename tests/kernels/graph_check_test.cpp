// A check captured into a CUDA graph (kernels/graph_check.h): every replay counts that replay's
// data, its ring entry is read without a driver call, and a replay read too late says it was
// overwritten. Needs a GPU: skips cleanly without one, and runs in scripts/device-check.sh.
#include "kernels/graph_check.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/kernels/check_reference.h"

namespace nanprov::kernels {
namespace {

using namespace testing_support;

// A graph holding one check of a bf16 buffer, captured on its own stream.
struct GraphWithCheck {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::unique_ptr<GraphCheck> check;
  uint64_t id_while_capturing = 0;

  explicit GraphWithCheck(const TensorView& v) {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(captureIdOf(stream), 0u) << "not capturing yet";
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    id_while_capturing = captureIdOf(stream);
    auto captured = GraphCheck::capture(0, &v, 1, stream);
    EXPECT_TRUE(captured.ok()) << captured.status().message();
    if (captured.ok()) check = std::move(captured.value());
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << "capturing the check left the capture valid";
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  }
  ~GraphWithCheck() {
    cudaStreamSynchronize(stream);
    check.reset();
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
  void replay() {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
};

TEST(GraphCheck, EveryReplayCountsThatReplaysData) {
  REQUIRE_GPU();
  const size_t bytes = 1 << 16;
  std::vector<uint8_t> host = randomBits(bytes, 21);
  DeviceBuffer dev(host);
  const TensorView v = view(dev.p, ElementType::kBFloat16, {static_cast<int64_t>(bytes / 2)}, {1});
  GraphWithCheck g(v);
  ASSERT_TRUE(g.check);
  EXPECT_NE(g.id_while_capturing, 0u);
  HealthCounts got{};
  EXPECT_EQ(g.check->read(0, &got), GraphCheck::Replay::kPending) << "capturing ran nothing";
  for (uint64_t n = 0; n < 2 * kGraphRingEntries + 3; ++n) {
    std::vector<uint8_t> data = randomBits(bytes, 100 + static_cast<uint32_t>(n));
    ASSERT_EQ(cudaMemcpy(dev.p, data.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the graph's stream does not wait for the default one
    g.replay();
    SCOPED_TRACE("replay " + std::to_string(n));
    ASSERT_EQ(g.check->read(n, &got), GraphCheck::Replay::kDone);
    expectCounts(got, reference(data, v, 0));
    EXPECT_EQ(g.check->read(n + 1, &got), GraphCheck::Replay::kPending);
  }
  EXPECT_EQ(g.check->replaysRun(), 2 * kGraphRingEntries + 3);
}

TEST(GraphCheck, AReplayReadTooLateIsOverwrittenNeverAnotherReplaysCounts) {
  REQUIRE_GPU();
  std::vector<uint8_t> host = randomBits(1 << 12, 5);
  DeviceBuffer dev(host);
  const TensorView v = view(dev.p, ElementType::kBFloat16, {1 << 11}, {1});
  GraphWithCheck g(v);
  ASSERT_TRUE(g.check);
  for (int n = 0; n < kGraphRingEntries + 2; ++n) g.replay();
  HealthCounts got{};
  EXPECT_EQ(g.check->read(0, &got), GraphCheck::Replay::kOverwritten);
  EXPECT_EQ(g.check->read(1, &got), GraphCheck::Replay::kOverwritten);
  ASSERT_EQ(g.check->read(kGraphRingEntries + 1, &got), GraphCheck::Replay::kDone);
  expectCounts(got, reference(host, v, 0));
}

}  // namespace
}  // namespace nanprov::kernels
