// End-to-end: the warning before the NaN (issue 50). A nanoGPT-style model whose attention is
// computed in float16 trains at a learning rate that grows its query and key weights until the
// scores overflow (tests/e2e/scripts/logit_growth.py). nanprov must say so while the training
// runs, once, before the first non-finite value, and its per-layer trend must be the largest score
// the script's own softmax received (--truth), step by step. A stable run of the same model, and
// the demo, must get no warning.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kScript = std::string(NANPROV_TEST_SCRIPTS) + "/logit_growth.py";

int countOf(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(LogitTrend, WarnsBeforeTheNaNAndFollowsTheScriptsOwnScores) {
  TrainedRun r = train("trend-diverging", "", "--steps 45 --truth --oracle", kScript);
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  std::smatch oracle;
  ASSERT_TRUE(
      std::regex_search(r.train.out, oracle, std::regex("first non-finite forward output: (\\S+) at step (\\d+)")))
      << r.train.out;
  const int nan_step = std::stoi(oracle[2].str());
  expectFields(r.doc["first_edge"], {{"module", oracle[1].str()}, {"step", nan_step}, {"origin", "attention"}});

  // Said once, while the training ran, before its NaN; and said again when the NaN came, with how
  // many steps before it the warning came (issue 61).
  EXPECT_EQ(countOf(r.train.out, "A trend, not a verdict"), 1) << r.train.out;
  EXPECT_EQ(countOf(r.train.out, "nanprov: warning:"), 2) << r.train.out;
  std::smatch said;
  ASSERT_TRUE(std::regex_search(r.train.out, said,
                                std::regex("nanprov: warning: rank 0, step (\\d+): (\\S+) attention logits grew")))
      << r.train.out;
  const int warned_step = std::stoi(said[1].str());
  EXPECT_LT(warned_step, nan_step) << "the warning must come before the NaN";
  EXPECT_LT(r.train.out.find("nanprov: warning:"), r.train.out.find("oracle:")) << "said while the training ran";
  const std::string before = std::to_string(nan_step - warned_step) +
                             " steps before the first non-finite value, at step " + std::to_string(nan_step) + ".\n";
  EXPECT_NE(r.train.out.find(before), std::string::npos) << r.train.out;
  std::printf("warned at step %d, %d steps before the first non-finite value (step %d)\n", warned_step,
              nan_step - warned_step, nan_step);

  const json& trends = r.doc["trends"];
  ASSERT_FALSE(trends["warnings"].empty()) << trends.dump();
  const json& first = trends["warnings"][0];
  expectFields(first, {{"kind", "growth"},
                       {"step", warned_step},
                       {"module", said[2].str()},
                       {"logit_source", "scores"},
                       {"scores_dtype", "Half"},
                       {"steps_before_first_nonfinite", nan_step - warned_step}});
  bool precision = false;
  for (const json& w : trends["warnings"]) {
    if (w["kind"] != "precision") continue;
    precision = true;
    EXPECT_GE(w["value"].get<double>(), 2048.0) << "float16 scores are 2 apart from 2,048: " << w.dump();
    EXPECT_LT(w["step"].get<int>(), nan_step) << w.dump();
  }
  EXPECT_TRUE(precision) << trends["warnings"].dump();

  // The trend is the script's own largest score per step and layer, before the NaN.
  std::map<std::pair<int, int>, double> truth;
  std::regex line("truth: step (\\d+) layer (\\d+) largest score (\\S+)");
  for (auto it = std::sregex_iterator(r.train.out.begin(), r.train.out.end(), line); it != std::sregex_iterator();
       ++it) {
    truth[{std::stoi((*it)[1].str()), std::stoi((*it)[2].str())}] = std::stod((*it)[3].str());
  }
  ASSERT_EQ(trends["layers"].size(), 2u) << trends.dump();
  int compared = 0;
  for (const json& layer : trends["layers"]) {
    EXPECT_EQ(layer["bucket_steps"], 1) << "45 steps fit the trend at one step a point";
    for (const json& p : layer["points"]) {
      const int step = p["step"];
      if (step >= nan_step) continue;
      auto want = truth.find({step, layer["layer"].get<int>()});
      ASSERT_NE(want, truth.end()) << p.dump();
      EXPECT_DOUBLE_EQ(p["logit"].get<double>(), want->second) << "layer " << layer["layer"] << " step " << step;
      EXPECT_EQ(p["logit_source"], "scores");
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * nan_step);
  EXPECT_NE(r.report.out.find("\"trends\""), std::string::npos);
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("trend warning: rank0 step " + std::to_string(warned_step)), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("steps before the first non-finite value"), std::string::npos) << text.out;

  // The page: a plot per layer, the warnings listed.
  const fs::path page = r.dir / "report.html";
  sh(nanprov() + " report " + r.dir.string() + " --html " + page.string());
  const std::string html = sh("cat " + page.string()).out;
  EXPECT_NE(html.find("<section id=\"trends\">"), std::string::npos);
  EXPECT_EQ(countOf(html, "<svg class=\"trend\""), 2) << "one plot per layer";
  EXPECT_NE(html.find("trend warning at step " + std::to_string(warned_step)), std::string::npos);
  EXPECT_NE(html.find("first non-finite value at step " + std::to_string(nan_step)), std::string::npos);
}

// Clean training with each kind of mask (tests/e2e/scripts/masked_attention.py): padding, and, for
// the finite fills, a caption dropped as in diffusers' guidance-dropout training (every key of a
// sample hidden by a -10000 bias), from step 3 on. A mask's fills are not logits: no warning, live
// or in the report, and the trend follows the largest score over visible keys, which the script's
// own hooks print (--oracle). float64 with finfo(float64).min must not overflow the trend's own
// arithmetic (issue 61).
void expectNoWarningWithMask(const std::string& mask, const std::string& dtype, const std::string& attn) {
  SCOPED_TRACE(mask + " " + dtype + " " + attn);
  const std::string name = "trend-mask-" + mask + "-" + dtype + "-" + attn;
  TrainedRun r = train(name, "", "--mask " + mask + " --dtype " + dtype + " --attn " + attn + " --oracle",
                       std::string(NANPROV_TEST_SCRIPTS) + "/masked_attention.py");
  ASSERT_NE(r.train.out.find("oracle: every forward output finite"), std::string::npos) << r.train.out;
  std::smatch oracle;
  ASSERT_TRUE(std::regex_search(r.train.out, oracle, std::regex("oracle: largest visible score (\\S+)")))
      << r.train.out;
  const double visible = std::stod(oracle[1].str());
  ASSERT_LT(visible, 100.0) << "the model's own logits stay small: any warning is a false alarm";
  EXPECT_EQ(r.report.code, 0) << r.train.out << r.report.out;
  expectFields(r.doc, {{"outcome", "clean"}});
  EXPECT_EQ(r.train.out.find("warning:"), std::string::npos) << r.train.out;
  EXPECT_TRUE(r.doc["trends"]["warnings"].empty()) << r.doc["trends"].dump();
  ASSERT_EQ(r.doc["trends"]["layers"].size(), 2u) << r.doc["trends"].dump();
  double peak = 0;
  std::string source;
  for (const json& layer : r.doc["trends"]["layers"]) {
    for (const json& p : layer["points"]) {
      if (p["logit"].is_number() && p["logit"].get<double>() > peak) {
        peak = p["logit"].get<double>();
        source = p["logit_source"].get<std::string>();
      }
    }
  }
  if (attn == "plain") {
    EXPECT_EQ(source, "scores");
    EXPECT_DOUBLE_EQ(peak, visible) << "the scores' largest value is the largest visible score, whatever the fill";
  } else {
    // LSE >= a row's largest visible logit, and above it by at most log(keys); a bound only above.
    EXPECT_GE(peak, visible * (1 - 1e-6)) << r.doc["trends"].dump();
    EXPECT_LT(peak, source == "lse" ? visible + 3.0 : 100.0) << source << " " << r.doc["trends"].dump();
  }
  const std::string text = sh(nanprov() + " report " + r.dir.string()).out;
  EXPECT_EQ(text.find("trend warning"), std::string::npos) << text;
}

TEST(LogitTrend, NoWarningOnACleanRunWithAnyMaskInPlainOps) {
  for (const char* mask : {"neg1e4", "neg1e9", "finfo", "neginf", "bool"})
    expectNoWarningWithMask(mask, "float32", "plain");
  expectNoWarningWithMask("finfo", "float64", "plain");
}

TEST(LogitTrend, NoWarningOnACleanRunWithAnyMaskInSdpa) {
  for (const char* mask : {"neg1e4", "neg1e9", "finfo", "neginf", "bool"})
    expectNoWarningWithMask(mask, "float32", "sdpa");
  expectNoWarningWithMask("finfo", "float64", "sdpa");
}

// The same model at a learning rate it learns at: its logits grow (x10 and more) but stay far
// below any instability; and the demo. Neither is warned about, and the probes change no loss.
TEST(LogitTrend, NoWarningOnAStableRunOrTheDemo) {
  TrainedRun stable = train("trend-stable", "", "--lr 0.01 --steps 60 --print-losses", kScript);
  EXPECT_EQ(stable.report.code, 0) << stable.report.out;
  EXPECT_EQ(stable.train.out.find("warning:"), std::string::npos) << stable.train.out;
  EXPECT_TRUE(stable.doc["trends"]["warnings"].empty()) << stable.doc["trends"].dump();
  double peak = 0;
  for (const json& p : stable.doc["trends"]["layers"][0]["points"]) peak = std::max(peak, p["logit"].get<double>());
  EXPECT_GT(peak, 10.0) << "its logits do grow";
  Result plain = sh(python() + " " + kScript + " --lr 0.01 --steps 60 --print-losses 2>/dev/null");
  std::string probed_losses;
  std::istringstream lines(stable.train.out);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("step ", 0) == 0) probed_losses += l + "\n";
  }
  EXPECT_EQ(plain.out, probed_losses);

  TrainedRun demo = train("trend-demo", "", "--steps 40");
  EXPECT_EQ(demo.report.code, 0) << demo.report.out;
  EXPECT_EQ(demo.train.out.find("warning:"), std::string::npos) << demo.train.out;
  EXPECT_TRUE(demo.doc["trends"]["warnings"].empty());
  EXPECT_EQ(demo.doc["trends"]["layers"].size(), 2u);
  EXPECT_EQ(demo.doc["trends"]["layers"][0]["points"][0]["logit_source"], "lse")
      << "the CPU's flash kernel returns LSE";
}

}  // namespace
