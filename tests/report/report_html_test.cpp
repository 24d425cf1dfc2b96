#include "report/report_html.h"

#include <gtest/gtest.h>

#include "tests/report/synthetic_report.h"

namespace nanprov::report {
namespace {

using synthetic::edgeReport;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The page's sources as buildReport reads them with ReportOptions::page: one rank's picture of
// one layer over 4 steps, the edge's cell marked, and a kept replay.
PageSources sources() {
  PageSources s;
  s.picture.columns = 4;
  s.picture.phases = {Phase::kForward};
  RankPicture rank{.rank = 0};
  rank.rows[0] = PictureRow{.module = "layers.0.attn"};
  for (int64_t col = 0; col < 3; ++col)
    rank.cells[{0, Phase::kForward, col}] = PictureCell{.health = CellHealth::kClean, .calls = 1};
  rank.cells[{0, Phase::kForward, 3}] =
      PictureCell{.health = CellHealth::kSourceEdge, .calls = 1, .sources = 1, .first_edge = true};
  s.picture.ranks = {rank};
  s.capture = "runs/edge/captures/c.safetensors";
  s.kept_replay_path = "runs/edge/captures/c.replay.json";
  TensorJudgement ok{.role = "O", .verdict = "ok", .max_abs_err = 1e-7};
  TensorJudgement bad{.role = "O", .verdict = "non-finite", .nonfinite = 4, .nonfinite_where = "batch 0"};
  s.replay = KeptReplay{
      .replayed_on = "cpu",
      .captured_on = "cpu",
      .root_cause = "precision-limit",
      .explanation = "overflow",
      .rows = {ReplayedBackend{.captured = true, .tensors = {bad}}, ReplayedBackend{.name = "math", .tensors = {ok}},
               ReplayedBackend{.name = "cudnn", .supported = false, .detail = "no GPU"}}};
  s.environment = {.cuda_runtime = "12.8", .cudnn = "9.10.0", .gpu = "NVIDIA H100"};
  return s;
}

// The page renders the model alone, the page's sources included: the verdict, the edge, its cell
// in the picture, the replay matrix and the run's versions.
TEST(ReportHtml, RendersTheModelAndThePagesSources) {
  Report r = edgeReport();
  r.page = sources();
  const std::string page = reportHtml(r);
  EXPECT_NE(page.find("content=\"default-src 'none'; style-src 'unsafe-inline'\""), std::string::npos);
  EXPECT_NE(page.find("<header id=\"verdict\" class=\"verdict outcome-edge\" data-outcome=\"edge\">"),
            std::string::npos);
  EXPECT_NE(
      page.find("<h1 id=\"headline\">rank0:layer0:call6  first non-finite edge: finite inputs, non-finite O</h1>"),
      std::string::npos);
  EXPECT_NE(page.find("<section id=\"first-edge\" data-name=\"rank0:layer0:call6\">"), std::string::npos);
  EXPECT_EQ(count(page, "<td class=\"cell h-clean\""), 3u);
  EXPECT_EQ(count(page, "id=\"first-edge-cell\""), 1u);
  EXPECT_NE(page.find("id=\"replay-matrix\""), std::string::npos);
  EXPECT_NE(page.find("<tr data-backend=\"captured\"><th>the run's own outputs</th><td class=\"v-non-finite\""),
            std::string::npos);
  EXPECT_NE(page.find("4 non-finite batch 0"), std::string::npos);
  EXPECT_NE(page.find("<tr data-backend=\"cudnn\"><th>cudnn</th><td class=\"v-unsupported\" colspan=\"1\">unsupported: "
                      "no GPU</td>"),
            std::string::npos);
  EXPECT_NE(page.find("root cause <b>precision-limit</b>: overflow"), std::string::npos);
  EXPECT_NE(page.find("<tr><th>CUDA runtime</th><td>12.8</td></tr>"), std::string::npos);
  EXPECT_NE(page.find("<tr><th>cuDNN</th><td>9.10.0</td></tr>"), std::string::npos);
  EXPECT_NE(page.find("<code>python train.py</code>"), std::string::npos);
  EXPECT_NE(page.find("exited with code 0"), std::string::npos);
  EXPECT_NE(page.find("<tr><td>0</td><td>vm</td><td>1</td><td>6</td><td>24</td>"), std::string::npos);
}

// A rank's host and world size are shown as its store says them, a dash where it says none.
TEST(ReportHtml, RanksSayTheirHostAndWorldSizeAsStored) {
  Report r = edgeReport();
  r.run.ranks[0].host = "node<1>";
  r.run.ranks[0].world_size.reset();
  const std::string page = reportHtml(r);
  EXPECT_NE(page.find("<tr><td>0</td><td>node&lt;1&gt;</td><td>&ndash;</td>"), std::string::npos);
}

// A text from the store is text on the page, whatever it holds.
TEST(ReportHtml, TextsFromTheStoreStayText) {
  Report r = edgeReport();
  r.first_edge->call.module = "layers.0<script>alert(1)</script>\"'&";
  const std::string page = reportHtml(r);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_NE(page.find("layers.0&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;"), std::string::npos);
}

// Built without the page's sources (nothing streamed), the page draws no picture and shows no
// replay rather than make one up.
TEST(ReportHtml, WithoutThePagesSourcesNothingIsMadeUp) {
  const std::string page = reportHtml(edgeReport());
  EXPECT_NE(page.find("No attention call was checked: there is nothing to draw."), std::string::npos);
  EXPECT_NE(page.find("The edge was not captured, so there is nothing to replay."), std::string::npos);
  EXPECT_EQ(page.find("id=\"replay-matrix\""), std::string::npos);
  EXPECT_NE(page.find("<tr><th>GPU</th><td>not recorded (no CUDA call was checked)</td></tr>"), std::string::npos);
}

TEST(ReportHtml, AuditFindingsAreListed) {
  Report r{.run = synthetic::facts()};
  r.conclusion.outcome = Outcome::kAuditFinding;
  AuditSummary& a = r.conclusion.audit;
  a.on = true;
  a.audited = 4;
  a.findings = {AuditFinding{
      .name = "rank0:layer1:call5",
      .step = 2,
      .phase = "fwd",
      .backend = "cudnn",
      .kernel = "fprop",
      .verdict = "silent-wrong",
      .tensors = {TensorJudgement{.role = "O", .verdict = "silent-wrong", .max_abs_err = 0.5, .cosine = 0.9}},
      .conditions_text = "bias float32",
      .capture = "runs/edge/captures/a b.safetensors"}};
  const std::string page = reportHtml(r);
  EXPECT_NE(page.find("data-outcome=\"audit_finding\""), std::string::npos);
  EXPECT_NE(page.find("<tr class=\"finding\" data-name=\"rank0:layer1:call5\">"), std::string::npos);
  EXPECT_NE(page.find("O <b>silent-wrong</b>: max error 0.5 (yardstick &ndash;), cosine 0.9"), std::string::npos);
  EXPECT_NE(page.find("kernel <span class=\"mono\">fprop</span>"), std::string::npos);
  EXPECT_NE(page.find("<code>nanprov replay &#39;runs/edge/captures/a b.safetensors&#39;</code>"), std::string::npos);
}

}  // namespace
}  // namespace nanprov::report
