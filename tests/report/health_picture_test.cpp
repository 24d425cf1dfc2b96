#include "report/health_picture.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "report/build_report.h"
#include "store/reader.h"
#include "store/run_dir.h"
#include "store/writer.h"
#include "tests/temp_dir.h"

namespace nanprov::report {
namespace {
namespace fs = std::filesystem;

// One rank's store with a forward call in each of `layers` layers, at step 0; the call in
// `bad_layer` holds a NaN in O.
void writeLayers(const fs::path& dir, int layers, int bad_layer) {
  auto w = store::StoreWriter::open((dir / store::rankStoreName(0)).string(), {{"rank", "0"}});
  ASSERT_TRUE(w.ok());
  for (int layer = 0; layer < layers; ++layer) {
    CallRecord c;
    c.seq = layer, c.layer = layer, c.op = "op", c.backend = "flash_cpu", c.start_ns = layer;
    c.module = "blocks." + std::to_string(layer) + ".attn";
    for (Role role : {Role::kQ, Role::kO}) c.tensors.push_back(TensorHealth{.role = role, .numel = 4});
    if (layer == bad_layer) c.tensors.back().nan = 1, c.health = 1;
    (*w)->append(c);
  }
  (*w)->stepEnded(0, 1000);
  ASSERT_TRUE((*w)->close().ok());
}

// A deep model's rows are bands of consecutive layers, at most kMaxRows of them, cells the worst
// of their layers, and the first edge still marked in its band.
TEST(HealthPicture, ADeepModelDrawsBandsOfLayers) {
  fs::path dir = testing::freshDir("picture-deep");
  writeLayers(dir, 1000, 777);
  auto run = store::loadRun(dir.string(), store::RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  auto report = buildReport(*run, {.page = true});
  ASSERT_TRUE(report.ok()) << report.status().message();
  const HealthPicture* picture = &report->page->picture;
  EXPECT_EQ(picture->layers_per_row, 4) << "1000 layers in bands of 4: 250 rows";
  ASSERT_EQ(picture->ranks.size(), 1u);
  const RankPicture& rank = picture->ranks[0];
  ASSERT_EQ(rank.rows.size(), 250u);
  EXPECT_EQ(rank.rows.at(0).first_layer, 0);
  EXPECT_EQ(rank.rows.at(0).last_layer, 3);
  EXPECT_EQ(rank.rows.at(0).module, "blocks.0.attn");
  const PictureCell& bad = rank.cell(777 / 4, Phase::kForward, 0);
  EXPECT_EQ(bad.calls, 4);
  EXPECT_EQ(bad.health, CellHealth::kSourceEdge);
  EXPECT_TRUE(bad.first_edge);
  EXPECT_EQ(rank.cell(0, Phase::kForward, 0).health, CellHealth::kClean);
}

TEST(HealthPicture, AShallowModelDrawsOneRowPerLayer) {
  fs::path dir = testing::freshDir("picture-shallow");
  writeLayers(dir, HealthPicture::kMaxRows, -1);
  auto run = store::loadRun(dir.string(), store::RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  auto picture = drawHealthPicture(*run, {}, nullptr, nullptr);
  ASSERT_TRUE(picture.ok()) << picture.status().message();
  EXPECT_EQ(picture->layers_per_row, 1);
  EXPECT_EQ(picture->ranks[0].rows.size(), static_cast<size_t>(HealthPicture::kMaxRows));
}

}  // namespace
}  // namespace nanprov::report
