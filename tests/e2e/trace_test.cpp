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
                " --standalone --nproc-per-node=2 " + example("tiny_transformer.py") + " --steps 3 --glitch-step 1 --ddp 2>&1");
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

TEST(TraceEndToEnd, HelpSaysWhatTheFileIsAndHowToOpenIt) {
  Result help = sh(nanprov() + " trace --help 2>&1");
  EXPECT_EQ(help.code, 0);
  for (const char* words : {"Chrome trace-event JSON", "https://ui.perfetto.dev", "chrome://tracing", "--out"}) {
    EXPECT_NE(help.out.find(words), std::string::npos) << words << " in\n" << help.out;
  }
}

}  // namespace
}  // namespace e2e
