// `nanprov trace` on real training: a two-rank torchrun run with a real edge (a sensor glitch that
// overflows the attention logits), its timeline read back as a viewer reads it.
#include <gtest/gtest.h>

#include <set>

#include "tests/e2e/e2e_support.h"
#include "tests/trace_events.h"

namespace e2e {
namespace {

using namespace trace_events;

TEST(TraceEndToEnd, TwoRankRunIsANestedTimelineWithTheFirstEdgeMarked) {
  fs::path dir = runDir("trace-ddp");
  std::string torchrun = fs::path(python()).parent_path().string() + "/torchrun";
  // Loopback only: CI sandboxes have no other interface gloo could use.
  Result t = sh("GLOO_SOCKET_IFNAME=lo " + nanprov() + " run --out " + dir.string() + " -- " + torchrun +
                " --standalone --nproc-per-node=2 " + example("tiny_transformer.py") +
                " --steps 3 --glitch-step 1 --ddp 2>&1");
  ASSERT_EQ(t.code, 1) << "the glitch makes a source edge: " << t.out;
  const json report = commandJson("report", dir);
  ASSERT_TRUE(report["first_edge"].is_object()) << report.dump(1);
  const std::string edge = report["first_edge"]["name"];

  const fs::path file = dir / "timeline.json";
  Result r = sh(nanprov() + " trace " + dir.string() + " --out " + file.string() + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ui.perfetto.dev"), std::string::npos) << r.out;
  std::ifstream in(file);
  const json trace = json::parse(in, nullptr, false);
  expectSchema(trace);
  expectTracksNest(trace);
  expectFlowsPair(trace);  // none on the CPU: its kernels are the calls themselves

  // One complete event per stored call, named as the report and `calls` name them.
  std::multiset<std::string> stored, drawn;
  for (const json& c : commandJson("calls", dir)) stored.insert(c["name"].get<std::string>());
  for (const json& e : eventsOf(trace, "X")) {
    if (e["cat"] == "attention") drawn.insert(e["name"].get<std::string>());
  }
  EXPECT_FALSE(stored.empty());
  EXPECT_EQ(drawn, stored);

  // Both ranks are processes, each with its steps enclosing its forward calls.
  for (int rank : {0, 1}) {
    auto pid = pidOfRank(trace, rank);
    ASSERT_TRUE(pid) << "rank " << rank;
    auto training = tidNamed(trace, *pid, "training thread");
    ASSERT_TRUE(training && tidNamed(trace, *pid, "autograd")) << "rank " << rank;
    std::set<std::string> steps;
    for (const json& e : eventsOf(trace, "X")) {
      if (e["cat"] != "step" || e["pid"] != *pid) continue;
      steps.insert(e["name"].get<std::string>());
      EXPECT_EQ(e["tid"], *training);
      // Each step after the first starts where the store recorded the one before it ending.
      if (e["name"] != "step 0") EXPECT_EQ(e["args"]["start"], "the end recorded for the step before") << e.dump();
    }
    EXPECT_EQ(steps, (std::set<std::string>{"step 0", "step 1", "step 2"})) << "rank " << rank;
  }

  // The first edge: a marker on its rank, and the flag on its call.
  int flagged = 0;
  for (const json& e : eventsOf(trace, "X")) {
    if (!e["args"].value("first_edge", false)) continue;
    ++flagged;
    EXPECT_EQ(e["name"], edge);
    EXPECT_EQ(e["args"]["health"], "source");
  }
  EXPECT_EQ(flagged, 1);
  int marked = 0;
  for (const json& e : eventsOf(trace, "i")) {
    if (e["name"] != "first non-finite edge: " + edge) continue;
    ++marked;
    EXPECT_EQ(e["pid"], *pidOfRank(trace, report["first_edge"]["rank"].get<int>()));
  }
  EXPECT_EQ(marked, 1);

  // A file that cannot be written: one line, and a failing exit code.
  Result bad = sh(nanprov() + " trace " + dir.string() + " --out /nonexistent-dir/t.json 2>&1");
  EXPECT_NE(bad.code, 0);
  EXPECT_EQ(bad.out, "nanprov trace: cannot write trace /nonexistent-dir/t.json: No such file or directory\n");
}

// A long run's trace is a window of it, in bounded memory: by default the steps around the first
// edge, up to --max-calls calls, with a line saying what was left out; --steps and --ranks choose
// another. 200,000 calls (copies of a real run's, made in its store) once took 1.3 GB.
TEST(TraceEndToEnd, ALongRunIsTracedAsAWindowInBoundedMemory) {
  TrainedRun r = train("trace-long", "", "--steps 6 --glitch-step 4");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  // 200,000 copies of the run's step-0 calls, put in step 4 (stored after the run's own calls).
  Result longer = addCallCopies(r.dir / "rank-0.sqlite", 200'000, "new[col('step')] = 4");
  ASSERT_EQ(longer.code, 0) << longer.out;
  const fs::path file = r.dir / "window.json";
  const std::string timed = fs::exists("/usr/bin/time") ? "/usr/bin/time -f 'rss %M' " : "";
  Result t = sh(timed + nanprov() + " trace " + r.dir.string() + " --out " + file.string() + " 2>&1");
  ASSERT_EQ(t.code, 0) << t.out;
  // The edge, and half a window of the calls after it (the copies follow it in the store).
  const size_t held_at = t.out.find("1 rank, ");
  ASSERT_NE(held_at, std::string::npos) << t.out;
  const long held = std::stol(t.out.substr(held_at + 8));
  EXPECT_GT(held, 12'500) << t.out;
  EXPECT_LE(held, 25'000) << t.out;
  EXPECT_NE(t.out.find("attention calls, first non-finite edge " + r.doc["first_edge"]["name"].get<std::string>()),
            std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("choose others with --steps A:B"), std::string::npos) << t.out;
  if (size_t at = t.out.find("rss "); at != std::string::npos)
    EXPECT_LT(std::stol(t.out.substr(at + 4)), 400 * 1024) << t.out;
  json trace = json::parse(std::ifstream(file), nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  EXPECT_EQ(trace["otherData"]["first_edge"], r.doc["first_edge"]["name"]) << "the window holds the edge";
  // A window given: only those steps and ranks.
  Result steps = sh(nanprov() + " trace " + r.dir.string() + " --out " + file.string() + " --steps 5:5 --ranks 0 2>&1");
  ASSERT_EQ(steps.code, 0) << steps.out;
  json five = json::parse(std::ifstream(file), nullptr, false);
  size_t calls = 0;
  for (const json& e : eventsOf(five, "X")) {
    if (e["cat"] != "attention") continue;
    ++calls;
    EXPECT_EQ(e["args"]["step"], 5) << e.dump();
  }
  EXPECT_EQ(calls, 4u) << "2 layers, a forward and a backward each, at step 5";
  for (const char* bad : {"--steps 9:3", "--steps x", "--ranks a", "--max-calls 0"}) {
    Result refused = sh(nanprov() + " trace " + r.dir.string() + " --out " + file.string() + " " + bad + " 2>&1");
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.out;
    EXPECT_EQ(std::count(refused.out.begin(), refused.out.end(), '\n'), 1) << bad << ": " << refused.out;
  }
}

TEST(TraceEndToEnd, HelpSaysWhatTheFileIsAndHowToOpenIt) {
  Result help = sh(nanprov() + " trace --help 2>&1");
  EXPECT_EQ(help.code, 0);
  for (const char* words : {"Chrome trace-event JSON", "https://ui.perfetto.dev", "chrome://tracing", "--out"}) {
    EXPECT_NE(help.out.find(words), std::string::npos) << words << " in\n" << help.out;
  }
}

}  // namespace
}  // namespace e2e
