// End-to-end: a long CPU training under a small --store-budget stays under it and tells the same
// story as the same training without one, also when it trains on non-finite for hundreds of steps;
// a SIGKILL mid-run leaves a readable store under it.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

constexpr int64_t kBudget = 256 << 10;
// Small enough to run 800 steps in seconds; 4 calls a step (2 layers, fwd and bwd).
const std::string kModel = "--d-model 16 --heads 2 --seq 8 --batch 2 ";

int64_t storeBytes(const fs::path& dir) {
  int64_t bytes = 0;
  for (const char* name : {"rank-0.sqlite", "rank-0.sqlite-wal"}) {
    std::error_code ec;
    auto size = fs::file_size(dir / name, ec);
    if (!ec) bytes += static_cast<int64_t>(size);
  }
  return bytes;
}

TEST(StoreBudget, LongRunUnderABudgetNamesTheSameEdgeAndNonFiniteCalls) {
  const std::string args = kModel + "--steps 800 --glitch-step 790";
  TrainedRun bounded = train("budget-bounded", "--store-budget 256K", args);
  TrainedRun whole = train("budget-whole", "", args);
  ASSERT_EQ(bounded.report.code, 1) << bounded.train.out << bounded.report.out;
  ASSERT_EQ(whole.report.code, 1) << whole.report.out;
  EXPECT_LE(storeBytes(bounded.dir), kBudget);
  EXPECT_GT(storeBytes(whole.dir), kBudget) << "the same run unbounded is larger: the budget did something";

  // The same call, counts and input trail (its times and capture path are the run's own).
  for (const char* field : {"name", "seq", "step", "phase", "kind", "counts", "input_trail", "module"}) {
    EXPECT_EQ(bounded.doc["first_edge"][field], whole.doc["first_edge"][field]) << field;
  }
  EXPECT_EQ(bounded.doc["summary"]["calls"], whole.doc["summary"]["calls"]) << "summarised calls are counted";
  const json& summarised = bounded.doc["coverage"]["summarised"];
  ASSERT_TRUE(summarised.is_object()) << bounded.report.out;
  EXPECT_GT(summarised["calls"].get<int64_t>(), 1000);
  EXPECT_TRUE(whole.doc["coverage"]["summarised"].is_null());
  Result text = sh(nanprov() + " report " + bounded.dir.string());
  EXPECT_NE(text.out.find("summarised: "), std::string::npos) << text.out;

  Result bounded_bad = sh(nanprov() + " calls " + bounded.dir.string() + " --nonfinite");
  Result whole_bad = sh(nanprov() + " calls " + whole.dir.string() + " --nonfinite");
  EXPECT_EQ(bounded_bad.out, whole_bad.out);
  EXPECT_GT(bounded_bad.out.size(), 200u) << bounded_bad.out;

  // A summarised step says where its calls went rather than listing nothing.
  Result step = sh(nanprov() + " calls " + bounded.dir.string() + " --step 400 2>&1");
  EXPECT_EQ(step.code, 0) << step.out;
  EXPECT_NE(step.out.find("summarised by the store budget"), std::string::npos) << step.out;
  Result sums = sh(nanprov() + " sql " + bounded.dir.string() + " 'SELECT SUM(calls) FROM step_summaries' --json");
  EXPECT_EQ(sums.code, 0) << sums.out;
  EXPECT_NE(sums.out.find(std::to_string(summarised["calls"].get<int64_t>())), std::string::npos) << sums.out;

  // The trace marks the summarised steps in place of their calls: the whole run fits one trace,
  // so its marks count every summarised call, and its attention slices every call kept.
  const fs::path file = bounded.dir / "trace.json";
  Result traced = sh(nanprov() + " trace " + bounded.dir.string() + " --out " + file.string() + " 2>&1");
  ASSERT_EQ(traced.code, 0) << traced.out;
  EXPECT_NE(traced.out.find("the track \"summarised by the store budget\" marks"), std::string::npos) << traced.out;
  const json trace = json::parse(std::ifstream(file), nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  int64_t marked = 0, sliced = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "summarised") marked += e["args"]["calls"].get<int64_t>();
    if (e["ph"] == "X" && e["cat"] == "attention") ++sliced;
  }
  EXPECT_EQ(marked, summarised["calls"].get<int64_t>());
  EXPECT_EQ(sliced + marked, bounded.doc["summary"]["calls"].get<int64_t>());
}

// A run that trains on after its NaN (every later call propagates it) stays under the budget
// too: the first steps that were not clean are kept in full, the rest counted in summaries, and
// the report tells the story the unbounded run tells.
TEST(StoreBudget, ARunThatStaysNonFiniteStaysUnderItAndCountsItsCalls) {
  const std::string args = kModel + "--steps 800 --glitch-step 3";
  TrainedRun bounded = train("budget-nonfinite", "--store-budget 256K", args);
  TrainedRun whole = train("budget-nonfinite-whole", "", args);
  ASSERT_EQ(bounded.report.code, 1) << bounded.train.out << bounded.report.out;
  EXPECT_LE(storeBytes(bounded.dir), kBudget);
  EXPECT_GT(storeBytes(whole.dir), 4 * kBudget) << "797 steps of non-finite calls, each with its tensors";
  for (const char* field : {"name", "seq", "step", "phase", "kind", "counts", "input_trail", "module"}) {
    EXPECT_EQ(bounded.doc["first_edge"][field], whole.doc["first_edge"][field]) << field;
  }
  EXPECT_EQ(bounded.doc["propagation"], whole.doc["propagation"]) << "how far it spread is counted, not lost";
  EXPECT_EQ(bounded.doc["summary"]["calls"], whole.doc["summary"]["calls"]);
  const json& summarised = bounded.doc["coverage"]["summarised"];
  ASSERT_TRUE(summarised.is_object()) << bounded.report.out;
  EXPECT_GT(summarised["not_clean"].get<int64_t>(), 2000) << summarised.dump();

  // The first steps that were not clean are listed alike; the rest are said to be summarised.
  Result bounded_bad = sh(nanprov() + " calls " + bounded.dir.string() + " --nonfinite 2>&1");
  Result whole_bad = sh(nanprov() + " calls " + whole.dir.string() + " --nonfinite");
  // The header, then the 8 steps kept in full after the edge (4 calls a step), column padding aside.
  auto firstRows = [](const std::string& table) {
    std::istringstream in(table);
    std::vector<std::string> rows;
    for (std::string line; rows.size() < 1 + 8 * 4 && std::getline(in, line);) {
      rows.push_back(std::regex_replace(line, std::regex(" +"), " "));
    }
    return rows;
  };
  EXPECT_EQ(firstRows(whole_bad.out), firstRows(bounded_bad.out));
  EXPECT_NE(
      bounded_bad.out.find(std::to_string(summarised["not_clean"].get<int64_t>()) + " more calls that were not clean"),
      std::string::npos)
      << bounded_bad.out.substr(bounded_bad.out.size() - 400);
}

TEST(StoreBudget, SigkillMidRunLeavesAReadableStoreUnderTheBudget) {
  TrainedRun r = train("budget-sigkill", "--store-budget 256K",
                       kModel + "--steps 5000 --die-after-step 700 --die-how sigkill-mid-step");
  EXPECT_EQ(r.train.code, 128 + 9) << r.train.out;
  EXPECT_LE(storeBytes(r.dir), kBudget);
  EXPECT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_GE(r.doc["summary"]["calls"].get<int64_t>(), 701 * 4) << r.report.out;
  EXPECT_TRUE(r.doc["coverage"]["summarised"].is_object()) << r.report.out;
}

// nanprov's own one line, never the option library's words: what is wrong and what to give.
TEST(StoreBudget, ABadSizeIsOneLineAndAUsageError) {
  for (const std::string bad :
       {"lots", "100K", "-1", "1.5M", "1e99", "abc", "9999999999999999999G", "1T", "''", "1KK"}) {
    SCOPED_TRACE(bad);
    Result r = sh(nanprov() + " run --store-budget " + bad + " -- true 2>&1");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--store-budget"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find("see nanprov run --help"), std::string::npos) << r.out;
    for (const char* raw : {"Could not convert", "value ", "[b, kb", "INT"})
      EXPECT_EQ(r.out.find(raw), std::string::npos) << r.out;
  }
  for (const std::string good : {"512K", "1M", "1G", "1gib", "300000"}) {
    Result r =
        sh(nanprov() + " run --out " + runDir("budget-good").string() + " --store-budget " + good + " -- true 2>&1");
    EXPECT_EQ(r.code, 0) << good << ": " << r.out;
  }
}

}  // namespace
