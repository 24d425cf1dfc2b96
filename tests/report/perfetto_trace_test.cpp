#include "report/perfetto_trace.h"

#include <gtest/gtest.h>

#include "store/reader.h"
#include "tests/trace_events.h"

namespace nanprov::report {
namespace {

using nlohmann::json;
using namespace trace_events;

// A wall-clock origin as the probes stamp it (CLOCK_REALTIME ns), far from 0 on purpose.
constexpr int64_t kT0 = 1'700'000'000'000'000'000;

TensorHealth tensor(Role role, int64_t nan = 0) {
  TensorHealth t;
  t.role = role;
  t.numel = 64;
  t.nan = nan;
  return t;
}

CallRecord call(int rank, int64_t seq, int64_t step, int64_t layer, int64_t ordinal, Phase phase, int64_t start,
                int64_t end, std::vector<TensorHealth> tensors = {}) {
  CallRecord c;
  c.rank = rank;
  c.seq = seq;
  c.step = step;
  c.layer = layer;
  c.call = ordinal;
  c.phase = phase;
  c.start_ns = kT0 + start;
  c.end_ns = kT0 + end;
  c.module = "blocks." + std::to_string(layer) + ".attn";
  c.op = "aten::_scaled_dot_product_cudnn_attention";
  c.backend = "cudnn";
  c.device = Device::cuda(0);
  if (tensors.empty()) {
    tensors = phase == Phase::kForward ? std::vector{tensor(Role::kQ), tensor(Role::kO)}
                                       : std::vector{tensor(Role::kdO), tensor(Role::kdQ)};
  }
  c.tensors = std::move(tensors);
  return c;
}

KernelRecord kernel(int rank, int64_t seq, int64_t stream, int64_t start, int64_t end, const std::string& name) {
  KernelRecord k;
  k.rank = rank;
  k.seq = seq;
  k.name = name;
  k.device = 0;
  k.stream = stream;
  k.start_ns = kT0 + start;
  k.end_ns = kT0 + end;
  return k;
}

// Two ranks on CUDA, two steps. Rank 1's forward of layer 0 in step 1 makes NaN from finite
// inputs: the first edge; its backward is propagated. Rank 0's first call has two kernels on
// stream 7 that overlap by 100 ns, as programmatic dependent launch makes them.
store::RunData twoRankRun() {
  store::RunData run;
  run.dir = "runs/synthetic";
  for (int r : {0, 1}) {
    store::RankInfo info;
    info.rank = r;
    info.steps = 1;
    info.step_ends_ns = {{0, kT0 + 20'000}};  // step 1 did not end: the run stopped
    run.ranks.push_back(info);
  }
  run.calls = {
      call(0, 0, 0, 0, 1, Phase::kForward, 1'000, 5'000),
      call(1, 0, 0, 0, 1, Phase::kForward, 1'200, 5'100),
      call(0, 1, 0, 0, 2, Phase::kBackward, 10'000, 14'000),
      call(1, 1, 0, 0, 2, Phase::kBackward, 10'100, 14'200),
      call(0, 2, 1, 0, 3, Phase::kForward, 21'000, 25'000),
      call(1, 2, 1, 0, 3, Phase::kForward, 21'500, 26'000, {tensor(Role::kQ), tensor(Role::kO, 8)}),
      call(1, 3, 1, 0, 4, Phase::kBackward, 30'000, 34'000, {tensor(Role::kdO, 8), tensor(Role::kdQ, 8)}),
  };
  run.total_calls = static_cast<int64_t>(run.calls.size());
  run.kernels = {
      kernel(0, 0, 7, 1'500, 3'000, "void cudnn::fprop<128>(float*)"),
      kernel(0, 0, 7, 2'900, 4'000, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop"),
      kernel(0, 1, 13, 11'000, 13'000, "cudnn_generated_fort_native_sdpa_sm90_flash_bprop"),
      kernel(1, 2, 7, 22'000, 24'000, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop"),
  };
  return run;
}

json traceOf(const store::RunData& run) {
  auto timeline = timelineOf(run, analyze(run));
  EXPECT_TRUE(timeline.ok()) << timeline.status().message();
  return timeline.ok() ? perfettoTrace(*timeline) : json();
}

const json* eventNamed(const json& trace, const std::string& ph, const std::string& name) {
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == ph && e["name"] == name) return &e;
  }
  return nullptr;
}

TEST(TraceEvents, FollowTheTraceEventSchemaInMicroseconds) {
  const json trace = traceOf(twoRankRun());
  expectSchema(trace);
  // The origin is the run's earliest event across ranks: rank 0's first call, at 1 µs past kT0.
  EXPECT_EQ(trace["otherData"]["time_origin_ns"], kT0 + 1'000);
  const json* first = eventNamed(trace, "X", "rank0:layer0:call1");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->at("ts"), 0.0);
  EXPECT_DOUBLE_EQ(first->at("dur").get<double>(), 4.0);  // 4,000 ns
  const json* later = eventNamed(trace, "X", "rank1:layer0:call3");
  ASSERT_NE(later, nullptr);
  EXPECT_DOUBLE_EQ(later->at("ts").get<double>(), 20.5);
  EXPECT_DOUBLE_EQ(later->at("dur").get<double>(), 4.5);
}

TEST(TraceEvents, EachCallIsOneCompleteEventOnItsRanksTrainingOrAutogradTrack) {
  const store::RunData run = twoRankRun();
  const json trace = traceOf(run);
  EXPECT_EQ(eventsOf(trace, "X").size(), run.calls.size() + run.kernels.size() + 4)
      << "calls, kernels, 2 steps x 2 ranks";
  for (int rank : {0, 1}) {
    auto pid = pidOfRank(trace, rank);
    ASSERT_TRUE(pid) << "no process named rank " << rank;
    auto training = tidNamed(trace, *pid, kTrainingThreadTrack);
    auto autograd = tidNamed(trace, *pid, kAutogradTrack);
    ASSERT_TRUE(training && autograd);
    EXPECT_NE(*training, *autograd);
    for (const CallRecord& c : run.calls) {
      if (c.rank != rank) continue;
      const json* e = eventNamed(trace, "X", callName(c));
      ASSERT_NE(e, nullptr) << callName(c);
      EXPECT_EQ(e->at("pid"), *pid);
      EXPECT_EQ(e->at("tid"), c.phase == Phase::kForward ? *training : *autograd) << callName(c);
      EXPECT_EQ(e->at("cat"), "attention");
      EXPECT_EQ(e->at("args")["module"], "blocks.0.attn");
      EXPECT_EQ(e->at("args")["phase"], phaseName(c.phase));
    }
  }
  const json& propagated = eventNamed(trace, "X", "rank1:layer0:call4")->at("args");
  EXPECT_EQ(propagated["health"], "propagated");
  EXPECT_EQ(propagated["nonfinite_inputs"], json({"dO"}));
  EXPECT_EQ(propagated["nonfinite_outputs"], json({"dQ"}));
  EXPECT_EQ(eventNamed(trace, "X", "rank0:layer0:call1")->at("args")["health"], "clean");
}

TEST(TraceEvents, StepsEncloseTheirCallsFromTheRecordedStepEnds) {
  const json trace = traceOf(twoRankRun());
  expectTracksNest(trace);
  const int64_t pid = *pidOfRank(trace, 0), training = *tidNamed(trace, pid, kTrainingThreadTrack);
  std::vector<json> steps;
  for (const json& e : eventsOf(trace, "X")) {
    if (e["cat"] == "step" && e["pid"] == pid) steps.push_back(e);
  }
  ASSERT_EQ(steps.size(), 2u);
  // Step 0: from its first call (nothing recorded before it) to its recorded end, 20 µs past kT0.
  EXPECT_EQ(steps[0]["name"], "step 0");
  EXPECT_EQ(steps[0]["tid"], training);
  EXPECT_EQ(ns(steps[0]["ts"]), 0);
  EXPECT_EQ(ns(steps[0]["ts"]) + ns(steps[0]["dur"]), 19'000);
  EXPECT_EQ(steps[0]["args"]["start"], "its first attention call");
  EXPECT_EQ(steps[0]["args"]["end"], "its recorded end");
  // Step 1: from step 0's recorded end to its last call: it has no recorded end.
  EXPECT_EQ(steps[1]["name"], "step 1");
  EXPECT_EQ(ns(steps[1]["ts"]), 19'000);
  EXPECT_EQ(ns(steps[1]["ts"]) + ns(steps[1]["dur"]), 24'000);
  EXPECT_EQ(steps[1]["args"]["end"], "its last attention call (no end recorded)");
  // The forward calls lie inside their steps on the training thread's track.
  EXPECT_EQ(slicesAt(trace, {pid, training}, 2'000), (std::vector<std::string>{"step 0", "rank0:layer0:call1"}));
}

TEST(TraceEvents, TracksNestWhereStoredTimesOverlap) {
  store::RunData run = twoRankRun();
  // Rank 0's step 0 ends (as recorded) before its last forward does, as a clock step can make
  // it, and step 1's recorded end comes before its own forward ends.
  run.calls.push_back(call(0, 9, 0, 1, 1, Phase::kForward, 18'000, 22'000));
  run.ranks[0].step_ends_ns[1] = kT0 + 21'500;
  const json trace = traceOf(run);
  expectSchema(trace);
  expectTracksNest(trace);
  // The stored times stay in the args of the slices that were fitted: the kernel that started
  // before the one before it on stream 7 ended, and the step that ended before its call did.
  json kernel, step1;
  for (const json& e : eventsOf(trace, "X")) {
    if (e["pid"] != *pidOfRank(trace, 0)) continue;
    if (e["cat"] == "kernel" && e["args"]["short_name"] == "cudnn_generated_fort_native_sdpa_sm90_flash_fprop")
      kernel = e;
    if (e["name"] == "step 1") step1 = e;
  }
  ASSERT_TRUE(kernel.is_object() && step1.is_object());
  EXPECT_EQ(ns(kernel["ts"]), 2'000) << "starts when the kernel before it ends";
  EXPECT_EQ(ns(kernel["args"]["stored_ts"]), 1'900);
  EXPECT_EQ(ns(step1["ts"]), 21'000) << "starts when step 0, widened to hold its last call, ends";
  EXPECT_EQ(ns(step1["args"]["stored_ts"]), 19'000);
  const json* late = eventNamed(trace, "X", "rank0:layer1:call1");
  ASSERT_NE(late, nullptr);
  EXPECT_FALSE(late->at("args").contains("stored_ts")) << "the step widens to hold its call";
}

TEST(TraceEvents, KernelsSitOnStreamTracksWithAFlowFromTheirCall) {
  const store::RunData run = twoRankRun();
  const json trace = traceOf(run);
  const int64_t pid = *pidOfRank(trace, 0);
  auto stream7 = tidNamed(trace, pid, "CUDA stream 7");
  auto stream13 = tidNamed(trace, pid, "CUDA stream 13");
  ASSERT_TRUE(stream7 && stream13);
  EXPECT_NE(*stream7, *stream13);
  int kernels = 0;
  for (const json& e : eventsOf(trace, "X")) {
    if (e["cat"] != "kernel") continue;
    ++kernels;
    EXPECT_EQ(e["tid"], tidNamed(trace, e["pid"], "CUDA stream " + e["args"]["stream"].dump())) << e.dump();
  }
  EXPECT_EQ(kernels, 4);
  auto flows = expectFlowsPair(trace);
  ASSERT_EQ(flows.size(), 4u) << "one flow per kernel";
  std::multiset<std::pair<std::string, std::string>> joined;  // (call, kernel)
  for (const auto& [id, flow] : flows) {
    const auto& [start, end] = flow;
    auto calls = slicesAt(trace, trackOf(start), ns(start["ts"]));
    auto kernels_there = slicesAt(trace, trackOf(end), ns(end["ts"]));
    ASSERT_FALSE(calls.empty() || kernels_there.empty());
    joined.emplace(calls.back(), kernels_there.back());
  }
  EXPECT_EQ(joined.count({"rank0:layer0:call1", "cudnn::fprop"}), 1u);
  EXPECT_EQ(joined.count({"rank0:layer0:call1", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop"}), 1u);
  EXPECT_EQ(joined.count({"rank0:layer0:call2", "cudnn_generated_fort_native_sdpa_sm90_flash_bprop"}), 1u);
  EXPECT_EQ(joined.count({"rank1:layer0:call3", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop"}), 1u);
}

TEST(TraceEvents, TheFirstEdgeIsMarkedOnItsRank) {
  const json trace = traceOf(twoRankRun());
  const json* mark = eventNamed(trace, "i", "first non-finite edge: rank1:layer0:call3");
  ASSERT_NE(mark, nullptr);
  EXPECT_EQ(mark->at("pid"), *pidOfRank(trace, 1));
  EXPECT_EQ(mark->at("args")["origin"], "attention");
  EXPECT_EQ(mark->at("args")["nonfinite_outputs"], json({"O"}));
  const json* edge = eventNamed(trace, "X", "rank1:layer0:call3");
  EXPECT_EQ(mark->at("ts"), edge->at("ts"));
  EXPECT_EQ(edge->at("args")["first_edge"], true);
  EXPECT_EQ(edge->at("args")["health"], "source");
  EXPECT_EQ(trace["otherData"]["first_edge"], "rank1:layer0:call3");
  int marked = 0;
  for (const json& e : eventsOf(trace, "X")) marked += e["args"].value("first_edge", false) ? 1 : 0;
  EXPECT_EQ(marked, 1);
}

TEST(TraceEvents, CpuCallsHaveNoKernelTracks) {
  store::RunData run = twoRankRun();
  for (CallRecord& c : run.calls) c.device = Device::cpu();
  run.kernels.clear();
  for (const CallRecord& c : run.calls) run.kernels.push_back(store::cpuKernelOf(c));  // as loadRun gives them
  const json trace = traceOf(run);
  expectSchema(trace);
  expectTracksNest(trace);
  EXPECT_TRUE(eventsOf(trace, "s").empty());
  for (const json& e : eventsOf(trace, "X")) EXPECT_NE(e["cat"], "kernel") << e.dump();
  EXPECT_FALSE(tidNamed(trace, *pidOfRank(trace, 0), "CUDA stream -1"));
}

// Steps the store budget summarised have no calls: a slice per stretch of them marks where they
// were, on a track of its own, from the end recorded before the stretch to its last step's end
// (the nearest recorded ends where those were thinned); one with no end around it gets none.
TEST(TraceEvents, SummarisedStepsAreMarkedOnATrackOfTheirOwn) {
  store::RunData run = twoRankRun();
  // Rank 0 ran steps 0..5; 1..3 were summarised; step 2's end was not kept.
  store::RankInfo& r0 = run.ranks[0];
  r0.step_ends_ns = {{0, kT0 + 20'000}, {1, kT0 + 40'000}, {3, kT0 + 80'000}, {4, kT0 + 100'000}};
  r0.summarised_stretches = {{.first_step = 1, .last_step = 3, .calls = 12, .not_clean = 0},
                             {.first_step = 9, .last_step = 9, .calls = 4, .not_clean = 4}};  // no end after it
  const json trace = traceOf(run);
  expectSchema(trace);
  expectTracksNest(trace);
  const int64_t pid = *pidOfRank(trace, 0);
  const std::optional<int64_t> track = tidNamed(trace, pid, kSummarisedTrack);
  ASSERT_TRUE(track) << trace.dump();
  std::vector<json> marked;
  for (const json& e : eventsOf(trace, "X")) {
    if (e["cat"] == "summarised") marked.push_back(e);
  }
  ASSERT_EQ(marked.size(), 1u) << trace.dump();
  const json& m = marked[0];
  EXPECT_EQ(m["pid"], pid);
  EXPECT_EQ(m["tid"], *track);
  EXPECT_EQ(m["name"], "summarised: 12 calls, steps 1-3");
  EXPECT_EQ(m["args"]["calls"], 12);
  EXPECT_EQ(m["args"]["not_clean"], 0);
  EXPECT_NE(m["args"]["see"].get<std::string>().find("step_summaries"), std::string::npos);
  // From step 0's end (19 µs past the first call) to step 3's.
  EXPECT_EQ(ns(m["ts"]), 19'000);
  EXPECT_EQ(ns(m["ts"]) + ns(m["dur"]), 79'000);
  // Rank 1 summarised nothing: no such track.
  EXPECT_FALSE(tidNamed(trace, *pidOfRank(trace, 1), kSummarisedTrack));
}

TEST(TraceEvents, AnEmptyRunIsAnEmptyTimeline) {
  store::RunData run;
  run.ranks.push_back(store::RankInfo{});
  const json trace = traceOf(run);
  expectSchema(trace);
  EXPECT_TRUE(eventsOf(trace, "X").empty());
  EXPECT_TRUE(pidOfRank(trace, 0));
}

}  // namespace
}  // namespace nanprov::report

namespace nanprov::report {
namespace {

// An arrow needs a slice with room inside: a kernel of no duration gets none, and says so.
TEST(TraceEvents, AKernelOfNoDurationGetsNoArrow) {
  store::RunData run = twoRankRun();
  run.kernels[0].end_ns = run.kernels[0].start_ns;
  const json trace = traceOf(run);
  EXPECT_EQ(expectFlowsPair(trace).size(), 3u);
  EXPECT_EQ(trace["otherData"]["flows_without_room"], 1);
}

}  // namespace
}  // namespace nanprov::report
