// End-to-end: attention nanprov does not check, seen by `nanprov run --trail` in real CPU training
// (scripts/trail_batches.py: linear attention, no softmax, in a module named like attention). A
// run whose values went non-finite beside it is `unattributed` (exit 1), never read as fine; a
// clean one is `partial` (exit 0); when --trail names that attention's module as where the values
// were made, the headline says so; and the --probe-module that would check it is named once, by
// its class, and never when it was given.
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string batches() { return std::string(NANPROV_TEST_SCRIPTS) + "/trail_batches.py"; }

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// The NaN is made inside blocks.0.attn, linear attention nanprov did not check, from finite
// inputs (the script's hooks say so). The next block's SDPA receives it: an upstream edge. The
// headline joins the two facts: made inside that attention, its kernel unknown.
TEST(UncheckedAttention, NanMadeInsideItIsUnattributedAndNamedInTheHeadline) {
  TrainedRun r = train("unchecked-attn-nan", "--trail", "--oracle --fault attn", batches());
  EXPECT_NE(r.train.out.find("oracle: step 2 phase fwd first blocks.0.attn inputs finite"), std::string::npos)
      << r.train.out;
  EXPECT_EQ(r.train.code, 1) << "nanprov run exits with the report's code when the training exited 0: " << r.train.out;
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  EXPECT_EQ(r.doc["outcome"], "unattributed");
  EXPECT_EQ(r.doc["clean"], false);
  EXPECT_EQ(r.doc["made_in_unchecked_attention"], true);
  expectFields(
      r.doc["first_module"],
      {{"step", 2}, {"phase", "fwd"}, {"module", "blocks.0.attn"}, {"class", "LinearAttention"}, {"inputs", "finite"}});
  EXPECT_EQ(r.doc["first_edge"]["origin"], "upstream");
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(firstLine(text.out).find("reached attention from upstream: the first non-finite values were made inside "
                                     "blocks.0.attn (LinearAttention) at step 2 fwd, from finite inputs"),
            std::string::npos)
      << text.out;
  EXPECT_NE(firstLine(text.out).find("unchecked attention, so the kernel that made them is not known"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(text.out.find("cannot tell"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("outside attention"), std::string::npos) << text.out;
  // The page says the same outcome.
  const fs::path page = r.dir / "report.html";
  ASSERT_EQ(sh(nanprov() + " report " + r.dir.string() + " --html " + page.string() + " >/dev/null").code, 1);
  EXPECT_NE(sh("cat " + page.string()).out.find("data-outcome=\"unattributed\""), std::string::npos);
}

// Nothing went non-finite, but attention ran unchecked: partial, exit 0, and `nanprov runs` says
// partial too.
TEST(UncheckedAttention, CleanRunBesideItIsPartialAndExitsZero) {
  TrainedRun r = train("unchecked-attn-clean", "--trail", "--fault none", batches());
  EXPECT_EQ(r.train.code, 0) << r.train.out;
  ASSERT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_EQ(r.doc["outcome"], "partial");
  ASSERT_EQ(r.doc["coverage"]["unprobed"].size(), 1u) << r.doc["coverage"].dump();
  expectFields(r.doc["coverage"]["unprobed"][0],
               {{"kind",
                 "attention-like module LinearAttention at blocks.*.attn ran no attention op nanprov checks: not "
                 "checked"},
                {"probe_module", "LinearAttention"}});
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(firstLine(text.out).find("no fault in what was checked, but not everything was"), std::string::npos)
      << text.out;
  const fs::path root = r.dir.parent_path() / ("unchecked-attn-runs-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  fs::create_symlink(r.dir, root / "clean");
  json runs = json::parse(sh(nanprov() + " runs --root " + root.string() + " --json").out, nullptr, false);
  ASSERT_TRUE(runs.is_array() && runs.size() == 1) << runs.dump();
  EXPECT_EQ(runs[0]["outcome"], "partial");
  fs::remove_all(root);
}

// Two places of one class (blocks.0.attn, blocks.0.xattn): one suggestion, by class, printed once.
// Given, it is not suggested again.
TEST(UncheckedAttention, SuggestsTheClassOnceAndNeverWhatWasGiven) {
  TrainedRun r = train("unchecked-attn-suggest", "--trail", "--fault none --places 2", batches());
  ASSERT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_EQ(r.doc["coverage"]["unprobed"].size(), 2u) << r.doc["coverage"].dump();
  EXPECT_EQ(r.doc["coverage"]["suggested_probe_modules"], json::array({"LinearAttention"}));
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_EQ(occurrences(text.out, "--probe-module"), 1u) << text.out;
  EXPECT_NE(text.out.find("nanprov run --probe-module LinearAttention checks it\n"), std::string::npos) << text.out;
  // The NaN run prints it once too, beside the headline that names the attention.
  TrainedRun nan = train("unchecked-attn-suggest-nan", "--trail", "--fault attn --places 2", batches());
  Result nan_text = sh(nanprov() + " report " + nan.dir.string());
  EXPECT_EQ(occurrences(nan_text.out, "--probe-module"), 1u) << nan_text.out;

  TrainedRun given =
      train("unchecked-attn-given", "--trail --probe-module LinearAttention", "--fault none --places 2", batches());
  Result given_text = sh(nanprov() + " report " + given.dir.string());
  EXPECT_EQ(given_text.out.find("--probe-module"), std::string::npos) << given_text.out;
  EXPECT_EQ(given.doc["coverage"]["suggested_probe_modules"], json::array()) << given.report.out;
  // The module probe's record is seen by the trail: checked, so not counted unchecked.
  EXPECT_EQ(given.doc["outcome"], "clean") << given.report.out;
  EXPECT_TRUE(given.doc["coverage"]["unprobed"].empty()) << given.report.out;
}

// Watching attention-like modules (a pre-hook of their own) and walking nested batches only read:
// the losses are bit for bit those without nanprov.
TEST(UncheckedAttention, WatchingItLeavesTheLossesBitIdentical) {
  for (std::string args : {"--fault none --places 2 --batch dict", "--fault attn --batch list"}) {
    SCOPED_TRACE(args);
    Result plain = sh(python() + " " + batches() + " " + args + " 2>/dev/null | grep '^step'");
    Result probed = sh(nanprov() + " run --out " + runDir("unchecked-attn-identical").string() + " --trail -- " +
                       python() + " " + batches() + " " + args + " 2>&1 | grep -E '^step|--trail:'");
    ASSERT_EQ(plain.code, 0);
    EXPECT_NE(plain.out.find("step 3: loss"), std::string::npos) << plain.out;
    EXPECT_EQ(probed.out, plain.out);
  }
}

}  // namespace
