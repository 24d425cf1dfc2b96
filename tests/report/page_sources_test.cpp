#include "report/page_sources.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "report/build_report.h"
#include "store/reader.h"
#include "store/run_dir.h"
#include "store/writer.h"
#include "tests/report/synthetic_run.h"
#include "tests/temp_dir.h"

namespace nanprov::report {
namespace {

namespace fs = std::filesystem;

// One rank's store in `dir`: a clean forward at step 0 and one whose O went NaN at step 1, on a
// rank whose meta names its GPU and versions.
store::RunData storedRun(const fs::path& dir) {
  auto w = store::StoreWriter::open(
      (dir / store::rankStoreName(0)).string(),
      {{"rank", "0"}, {"gpu", "NVIDIA H100 (sm_90)"}, {"cuda_runtime", "12080"}, {"cudnn", "91000"}});
  EXPECT_TRUE(w.ok());
  (*w)->append(synthetic::forward(0, 0, 0, 0));
  (*w)->stepEnded(0, 2'000'000);
  CallRecord bad = synthetic::forward(0, 1, 1, 0, /*o_nan=*/3);
  bad.health = 1;
  (*w)->append(bad);
  EXPECT_TRUE((*w)->close().ok());
  auto run = store::loadRun(dir.string(), store::RunScope::kEdges);
  EXPECT_TRUE(run.ok()) << run.status().message();
  // The edge's capture, as the probes decide it.
  run->captures = {CaptureRecord{
      .rank = 0, .seq = 1, .trigger = CaptureTrigger::kFirstSourceEdge, .path = "captures/c.safetensors"}};
  return std::move(*run);
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// What nanprov replay --json keeps beside the capture (replay/replay_render.cpp), trimmed.
constexpr const char* kKeptReplay = R"({
  "replayed_on": "cpu", "captured_on": "cpu",
  "root_cause": {"class": "precision-limit", "explanation": "float32 overflows"},
  "captured": {"tensors": {"O": {"verdict": "non-finite", "nonfinite": 3, "nonfinite_where": "batch 0"}}},
  "backends": [{"name": "flash_cpu", "status": "ran", "original": true, "tensors": {"O": {"verdict": "non-finite"}}},
               {"name": "math", "status": "ran", "original": false, "tensors": {"O": {"verdict": "ok", "max_abs_err": 0.0}}},
               {"name": "cudnn", "status": "unsupported", "detail": "no GPU", "tensors": {}}],
  "known_issues": []
})";

// Asked for, the page's sources are read with the report: the picture streamed from the store,
// the edge's kept replay (typed), and the rank's versions.
TEST(PageSources, AreReadWhenThePageIsAskedFor) {
  const fs::path dir = testing::freshDir("page-sources");
  store::RunData run = storedRun(dir);
  write(dir / "captures/c.replay.json", kKeptReplay);
  auto report = buildReport(run, {.page = true});
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_TRUE(report->page);
  const PageSources& page = *report->page;
  EXPECT_EQ(page.capture, (dir / "captures/c.safetensors").string());
  EXPECT_EQ(page.kept_replay_path, (dir / "captures/c.replay.json").string());
  ASSERT_TRUE(page.replay) << page.replay_problem;
  ASSERT_EQ(page.replay->rows.size(), 4u) << "the run's own outputs, then each backend";
  EXPECT_TRUE(page.replay->rows[0].captured);
  EXPECT_EQ(page.replay->rows[0].tensors[0].nonfinite, 3);
  EXPECT_TRUE(page.replay->rows[1].original);
  EXPECT_FALSE(page.replay->rows[3].supported);
  EXPECT_EQ(page.replay->rows[3].detail, "no GPU");
  EXPECT_EQ(page.replay->root_cause, "precision-limit");
  EXPECT_EQ(page.environment.gpu, "NVIDIA H100 (sm_90)");
  EXPECT_EQ(page.environment.cudnn, "9.10.0") << "cuDNN's 91000, in the page's words";
  ASSERT_EQ(page.picture.ranks.size(), 1u);
  EXPECT_EQ(page.picture.columns, 2);
  EXPECT_TRUE(page.picture.ranks[0].cell(0, Phase::kForward, 1).first_edge);
  EXPECT_EQ(page.picture.ranks[0].cell(0, Phase::kForward, 0).health, CellHealth::kClean);
}

// A kept replay that is not a replay's JSON costs the page its matrix, not the page; none kept,
// the page says where one would be.
TEST(PageSources, ADamagedKeptReplayIsSaidAndTheRestRead) {
  const fs::path dir = testing::freshDir("page-sources-damaged");
  store::RunData run = storedRun(dir);
  auto none = buildReport(run, {.page = true});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->page->replay);
  EXPECT_EQ(none->page->replay_problem, "");
  EXPECT_EQ(none->page->kept_replay_path, (dir / "captures/c.replay.json").string());
  write(dir / "captures/c.replay.json", "{\"not\": \"a replay\"}");
  auto damaged = buildReport(run, {.page = true});
  ASSERT_TRUE(damaged.ok()) << damaged.status().message();
  EXPECT_FALSE(damaged->page->replay);
  EXPECT_NE(damaged->page->replay_problem.find("is not the JSON of nanprov replay"), std::string::npos)
      << damaged->page->replay_problem;
  EXPECT_EQ(damaged->page->picture.columns, 2);
}

}  // namespace
}  // namespace nanprov::report
