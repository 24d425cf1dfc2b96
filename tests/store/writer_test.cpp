#include "store/writer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "store/reader.h"
#include "store/run_dir.h"
#include "tests/temp_dir.h"

namespace nanprov {
namespace {
namespace fs = std::filesystem;
using testing::freshDir;

CallRecord makeCall(int64_t seq, int64_t step, Phase phase, int64_t nan_in_o) {
  CallRecord c;
  c.seq = seq;
  c.step = step;
  c.layer = seq % 3;
  c.call = seq / 3;
  c.phase = phase;
  c.op = "aten::_scaled_dot_product_flash_attention_for_cpu";
  c.backend = "flash_cpu";
  c.module = "layers." + std::to_string(c.layer) + ".attn";
  c.start_ns = 1000 + seq;
  c.end_ns = 2000 + seq;
  TensorHealth q{.role = "Q", .dtype = "float32", .shape = "[2,4,8,16]", .numel = 1024};
  TensorHealth o{.role = "O", .dtype = "float32", .shape = "[2,4,8,16]", .numel = 1024, .nan = nan_in_o};
  c.tensors = {q, o};
  return c;
}

TEST(StoreWriter, RoundTripsCallsTensorsAndSteps) {
  fs::path dir = freshDir("roundtrip");
  {
    auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}});
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    for (int i = 0; i < 6; ++i) (*writer)->append(makeCall(i, i / 3, Phase::kForward, i == 4 ? 7 : 0));
    (*writer)->stepEnded(0, 5000);
    ASSERT_TRUE((*writer)->close().ok());
  }
  EXPECT_FALSE(fs::exists(dir / "rank-0.sqlite-wal")) << "close() folds the WAL back";
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->calls.size(), 6u);
  EXPECT_EQ(run->ranks.at(0).steps, 1);
  const CallRecord& c = run->calls[4];
  EXPECT_EQ(c.seq, 4);
  EXPECT_EQ(c.module, "layers.1.attn");
  ASSERT_EQ(c.tensors.size(), 2u);
  EXPECT_EQ(c.tensors[0].role, "Q") << "role order as written";
  EXPECT_EQ(c.tensors[1].nan, 7);
}

TEST(StoreWriter, WhatWasFlushedSurvivesSigkill) {
  fs::path dir = freshDir("sigkill");
  std::string path = (dir / rankStoreName(3)).string();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto writer = StoreWriter::open(path, {{"rank", "3"}});
    if (!writer.ok()) _exit(2);
    for (int i = 0; i < 5; ++i) (*writer)->append(makeCall(i, 0, Phase::kForward, 0));
    (*writer)->stepEnded(0, 1);  // requests a flush
    // Wait until the batch is committed, then die without any cleanup.
    for (int tries = 0; tries < 200; ++tries) {
      auto run = loadRun(dir.string());
      if (run.ok() && run->calls.size() == 5) break;
      usleep(20000);
    }
    (*writer)->append(makeCall(5, 1, Phase::kForward, 0));  // never flushed
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->calls.size(), 5u);
  EXPECT_EQ(run->ranks.at(0).rank, 3);
}

TEST(StoreWriter, CloseTwiceIsANoOp) {
  fs::path dir = freshDir("close");
  auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {});
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE((*writer)->close().ok());
  EXPECT_TRUE((*writer)->close().ok());
  (*writer)->append(makeCall(0, 0, Phase::kForward, 0));  // after close: dropped, no crash
  EXPECT_EQ((*writer)->droppedRows(), 1);
}

}  // namespace
}  // namespace nanprov
