#include "store/writer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "store/reader.h"
#include "store/run_dir.h"
#include "store/write_failure.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
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
  c.device = Device::cpu();
  const TensorShape shape = *TensorShape::parse("[2,4,8,16]");
  const DtypeName float32 = DtypeName::intern("Float");
  TensorHealth q{.role = Role::kQ, .dtype = float32, .shape = shape, .numel = 1024};
  TensorHealth o{.role = Role::kO, .dtype = float32, .shape = shape, .numel = 1024, .nan = nan_in_o};
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
  EXPECT_EQ(c.tensors[0].role, Role::kQ) << "role order as written";
  EXPECT_EQ(c.tensors[1].nan, 7);
}

// Schema 5: a clean call is its signature plus one float32 max |x| per tensor, and reads back
// whole; a call that is not clean keeps its tensor rows. 20,000 clean calls take well under 200
// bytes each.
TEST(StoreWriter, CleanCallsAreStoredCompactlyAndReadBackWhole) {
  fs::path dir = freshDir("compact");
  const int n = 20000;
  {
    auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}});
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    for (int i = 0; i < n; ++i) {
      CallRecord c = makeCall(i, i / 6, i % 2 ? Phase::kBackward : Phase::kForward, i == n - 6 ? 3 : 0);
      c.tensors[0].max_abs = 1.5 + i % 7;
      c.tensors[0].masked_rows = -1;
      c.health = i == n - 6 ? 1 : 0;
      c.unattributed = i % 2 ? "kernel tracing covered the first 2 steps" : "";
      (*writer)->append(c);
      while ((*writer)->pendingCalls() > 50000) std::this_thread::yield();
    }
    ASSERT_TRUE((*writer)->close().ok());
  }
  int64_t bytes = static_cast<int64_t>(fs::file_size(dir / "rank-0.sqlite"));
  EXPECT_LT(bytes / n, 200) << bytes << " bytes for " << n << " calls";
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->calls.size(), static_cast<size_t>(n));
  EXPECT_EQ(run->total_calls, n);
  for (int i : {0, 1, 777, n - 6}) {
    const CallRecord& c = run->calls[static_cast<size_t>(i)];
    CallRecord want = makeCall(i, i / 6, i % 2 ? Phase::kBackward : Phase::kForward, i == n - 6 ? 3 : 0);
    ASSERT_EQ(c.tensors.size(), 2u) << i;
    EXPECT_EQ(c.module, want.module);
    EXPECT_EQ(c.unattributed, i % 2 ? "kernel tracing covered the first 2 steps" : "");
    EXPECT_EQ(c.tensors[0].role, Role::kQ);
    EXPECT_EQ(c.tensors[0].shape.text(), "[2,4,8,16]");
    EXPECT_EQ(c.tensors[0].numel, 1024);
    EXPECT_EQ(c.tensors[0].max_abs, 1.5 + i % 7);
    EXPECT_EQ(c.tensors[1].nan, i == n - 6 ? 3 : 0);
    EXPECT_EQ(c.health, i == n - 6 ? 1 : 0);
  }
  auto rows = queryRun(dir.string(), "SELECT COUNT(*) FROM tensors");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  EXPECT_EQ(*rows->rows[0][0], "2") << "only the call that is not clean has tensor rows";
  auto view = queryRun(dir.string(), "SELECT op, module, edge FROM calls WHERE seq = " + std::to_string(n - 6));
  ASSERT_TRUE(view.ok()) << view.status().message();
  EXPECT_EQ(*view->rows[0][1], "layers." + std::to_string((n - 6) % 3) + ".attn");
  EXPECT_EQ(*view->rows[0][2], "source");

  // The report's read: the edge and the forward before it in its step, found through the index.
  auto edges = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(edges.ok()) << edges.status().message();
  EXPECT_EQ(edges->total_calls, n);
  EXPECT_EQ(edges->not_clean.calls, 1);
  ASSERT_EQ(edges->calls.size(), 2u);
  EXPECT_EQ(edges->calls[0].seq, n - 8) << "the forward before it in the same step";
  EXPECT_EQ(edges->calls[1].seq, n - 6);
  EXPECT_EQ(edges->kernelsOf(0, n - 6).size(), 1u) << "a CPU call's kernel is its op";
}

TEST(StoreWriter, RoundTripsKernelsMetaAndAttribution) {
  fs::path dir = freshDir("kernels");
  {
    auto writer = StoreWriter::open((dir / rankStoreName(2)).string(), {{"rank", "2"}});
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    CallRecord bwd = makeCall(1, 0, Phase::kBackward, 0);
    bwd.device = Device::cuda(0);
    CallRecord unattributed = makeCall(2, 0, Phase::kForward, 0);
    unattributed.device = Device::cuda(0);
    unattributed.unattributed = "torch.profiler was active";
    (*writer)->append(bwd);
    (*writer)->append(unattributed);
    std::vector<KernelRecord> kernels(3);
    const char* names[] = {"cudnn::fusion::compute_dot_do_o_specialized",
                           "cudnn_generated_fort_native_sdpa_sm90_flash_bprop", "cudnn::fusion::convert_dq_to_16bits"};
    for (int i = 0; i < 3; ++i) {
      kernels[i].seq = 1;
      kernels[i].name = names[i];
      kernels[i].correlation_id = 100 + i;
      kernels[i].grid[0] = 8 * (i + 1);
      kernels[i].block[0] = 128;
      kernels[i].start_ns = 10 * (3 - i);  // stored out of order: the reader orders by start
      kernels[i].end_ns = kernels[i].start_ns + 5;
      kernels[i].device = 0;
      kernels[i].stream = 7;
    }
    (*writer)->appendKernels(kernels);
    (*writer)->setCounters({.host_syncs = 0});
    (*writer)->setCounters({.host_syncs = 2});  // a later value replaces the earlier
    ASSERT_TRUE((*writer)->close().ok());
  }
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  auto k = run->kernelsOf(2, 1);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0]->name, "cudnn::fusion::convert_dq_to_16bits") << "ordered by start time";
  EXPECT_EQ(k[0]->rank, 2);
  EXPECT_EQ(k[2]->grid[0], 8);
  EXPECT_TRUE(run->kernelsOf(2, 2).empty());
  EXPECT_TRUE(run->kernelsOf(0, 1).empty()) << "another rank's seq 1 is another call";
  EXPECT_EQ(run->calls[0].device, Device::cuda(0));
  EXPECT_EQ(run->calls[1].unattributed, "torch.profiler was active");
  EXPECT_EQ(run->ranks[0].counters.host_syncs, 2);
  EXPECT_EQ(run->ranks[0].meta.at("host_syncs"), "2") << "the row nanprov sql shows";
  auto rows = queryRun(dir.string(), "SELECT rank, COUNT(*) FROM kernels GROUP BY rank");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(*rows->rows[0][0], "2");
  EXPECT_EQ(*rows->rows[0][1], "3");
}

TEST(StoreWriter, RoundTripsCapturesWrittenAndSkipped) {
  fs::path dir = freshDir("captures");
  {
    auto writer = StoreWriter::open((dir / rankStoreName(1)).string(), {{"rank", "1"}});
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    (*writer)->append(makeCall(4, 0, Phase::kBackward, 1));
    (*writer)->appendCapture(
        {.rank = 1, .seq = 4, .trigger = CaptureTrigger::kFirstSourceEdge, .skipped = "over the capture budget"});
    (*writer)->appendCapture(
        {.rank = 1, .seq = 4, .trigger = CaptureTrigger::kSelector, .path = "captures/a.safetensors", .bytes = 4096});
    (*writer)->appendCapture(
        {.rank = 1, .seq = 7, .trigger = CaptureTrigger::kEvery, .skipped = "writing failed: disk full"});
    ASSERT_TRUE((*writer)->close().ok());
  }
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->captures.size(), 3u);
  const CaptureRecord* c = run->captureOf(1, 4);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->path, "captures/a.safetensors") << "a written capture wins over a skipped one of the same call";
  EXPECT_EQ(c->bytes, 4096);
  EXPECT_EQ(c->phase, Phase::kBackward) << "the captured call's, from the calls table";
  EXPECT_EQ(run->captureOf(1, 7)->skipped, "writing failed: disk full");
  EXPECT_EQ(run->captureOf(1, 7)->layer, -1) << "call 7's row never reached the store";
  EXPECT_EQ(run->captureOf(0, 4), nullptr) << "rank 0 captured nothing";
  auto rows = queryRun(dir.string(), "SELECT rank, trigger FROM captures WHERE skipped IS NULL");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(*rows->rows[0][1], "selector");
}

TEST(StoreWriter, RoundTripsSentinelFindingsAsGradOrParam) {
  fs::path dir = freshDir("sentinel");
  {
    auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}});
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    (*writer)->appendSentinel(
        {{.step = 3, .tensor = SentinelTensor::kGrad, .parameter = "head.weight", .norm = INFINITY},
         {.step = 3, .tensor = SentinelTensor::kParam, .parameter = "head.bias", .norm = NAN}});
    ASSERT_TRUE((*writer)->close().ok());
  }
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->sentinel.size(), 2u);
  EXPECT_EQ(run->sentinel[0].tensor, SentinelTensor::kGrad);
  EXPECT_EQ(run->sentinel[1].tensor, SentinelTensor::kParam);
  EXPECT_TRUE(std::isnan(run->sentinel[1].norm));
  auto rows = queryRun(dir.string(), "SELECT tensor FROM sentinel ORDER BY rowid");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->rows.size(), 2u);
  EXPECT_EQ(*rows->rows[0][0], "grad") << "the store's text is what it was";
  EXPECT_EQ(*rows->rows[1][0], "param");
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

// A store whose writes fail (here the file size limit, as `ulimit -f` sets it) keeps what it
// committed readable, records from which step it is incomplete and why beside it, and goes on
// writing once there is room: the budget's pruning makes room again.
TEST(StoreWriter, AFileSizeLimitIsRecordedAndTheStoreStaysReadable) {
  fs::path dir = freshDir("file-size-limit");
  const std::string path = (dir / processStoreName(4242)).string();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // as Python does: the write fails with EFBIG instead
    rlimit limit{.rlim_cur = 400 << 10, .rlim_max = RLIM_INFINITY};
    setrlimit(RLIMIT_FSIZE, &limit);
    int said = 0;
    auto writer =
        StoreWriter::open(path, {{"rank", "0"}}, 0, {}, {}, [&](const WriteFailure&, const std::string&) { ++said; });
    if (!writer.ok()) _exit(2);
    int64_t seq = 0;
    for (int64_t step = 0; step < 300; ++step) {
      for (int i = 0; i < 60; ++i) (*writer)->append(makeCall(seq++, step, Phase::kForward, 0));
      (*writer)->stepEnded(step, 10'000 + step);
      while ((*writer)->pendingCalls() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    Status closed = (*writer)->close();
    _exit(!closed.ok() && said == 1 && (*writer)->writeFailure() ? 0 : 3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the writer met the limit, said it once and kept it";
  auto failure = readWriteFailure(path);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->kind, WriteFailureKind::kFileSizeLimit);
  EXPECT_GT(failure->from_step, 0);
  EXPECT_LT(failure->from_step, 300);
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->ranks.size(), 1u);
  EXPECT_TRUE(run->ranks[0].write_failure.has_value());
  EXPECT_EQ(run->damage, std::vector<std::string>{});
  EXPECT_GT(run->total_calls, 0);
  EXPECT_LT(run->total_calls, 300 * 60);
  EXPECT_GE(run->ranks[0].steps, failure->from_step);
  ASSERT_EQ(run->incompleteStores().size(), 1u);
  EXPECT_EQ(run->incompleteStores()[0], "rank 0: the store is incomplete from step " +
                                            std::to_string(failure->from_step) +
                                            ": the file size limit (ulimit -f) was hit");
}

// A store that never failed leaves no failure record beside it.
TEST(StoreWriter, AStoreThatNeverFailedLeavesNoFailureRecord) {
  fs::path dir = freshDir("no-failure");
  auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}});
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  (*writer)->append(makeCall(0, 0, Phase::kForward, 0));
  ASSERT_TRUE((*writer)->close().ok());
  EXPECT_FALSE(fs::exists(dir / "rank-0.sqlite.write-failure"));
  EXPECT_FALSE(readWriteFailure((dir / rankStoreName(0)).string()).has_value());
}

// A store that cannot be made (its schema is past the file size limit) leaves nothing behind: no
// staging file, no WAL of one, and the error says why.
TEST(StoreWriter, AStoreThatCannotBeMadeLeavesNothingBehind) {
  fs::path dir = freshDir("not-made");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{.rlim_cur = 8 << 10, .rlim_max = RLIM_INFINITY};
    setrlimit(RLIMIT_FSIZE, &limit);
    auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}});
    _exit(writer.ok() ? 3 : 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (const auto& entry : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << entry.path();
}

// Replica digests stay bounded over any run's length: every step's whole-model digest (parameter
// ""), each parameter's only at the landmark steps (the first 16, then powers of two) and the
// newest kNewestParameterSteps.
TEST(StoreWriter, ReplicaDigestsKeepEveryStepsWholeModelAndFewStepsOfEachParameter) {
  fs::path dir = freshDir("replica-digests");
  {
    auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}});
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    for (int64_t step = 0; step < 100; ++step) {
      std::vector<ReplicaDigestRecord> rows;
      for (const char* p : {"embed.weight", "head.weight", "head.bias"})
        rows.push_back({.step = step, .parameter = p, .digest = step});
      (*writer)->appendReplicaDigests(std::move(rows));
      if (step % 10 == 9) (*writer)->requestFlush();
    }
    ASSERT_TRUE((*writer)->close().ok());
  }
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  std::set<int64_t> whole, of_parameters;
  for (const ReplicaDigestRecord& d : run->replica_digests)
    (d.parameter.empty() ? whole : of_parameters).insert(d.step);
  EXPECT_EQ(whole.size(), 100u);
  std::set<int64_t> kept = {16, 32, 64, 96, 97, 98, 99};
  for (int64_t step = 0; step < 16; ++step) kept.insert(step);
  EXPECT_EQ(of_parameters, kept);
  EXPECT_EQ(run->replica_digests.size(), 100 + 3 * kept.size());
}

}  // namespace
}  // namespace nanprov::store
