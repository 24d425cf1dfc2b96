#include "report/judgements.h"

#include <gtest/gtest.h>

namespace nanprov::report {
namespace {

using nlohmann::json;

// Read as the page and the text show them: a measure written null (NaN has no JSON) is none, a
// comparison that is not an object is left out, a missing verdict reads "?".
TEST(Judgements, TensorsAreReadTypedAndLeniently) {
  const json tensors = json::parse(R"({
    "dQ": {"verdict": "silent-wrong", "max_abs_err": 3.5, "cosine": null, "nonfinite": 2, "nonfinite_where": "batch 0"},
    "O": {"max_abs_err": "big"},
    "dK": 7
  })");
  const std::vector<TensorJudgement> judged = judgementsOf(tensors);
  ASSERT_EQ(judged.size(), 2u);
  const TensorJudgement* dq = judgementOf(judged, "dQ");
  ASSERT_TRUE(dq);
  EXPECT_EQ(dq->verdict, "silent-wrong");
  EXPECT_EQ(dq->max_abs_err, 3.5);
  EXPECT_FALSE(dq->cosine);
  EXPECT_EQ(dq->nonfinite, 2);
  EXPECT_EQ(dq->nonfinite_where, "batch 0");
  const TensorJudgement* o = judgementOf(judged, "O");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->verdict, "?");
  EXPECT_FALSE(o->max_abs_err) << "a text where a number belongs is no number";
  EXPECT_FALSE(judgementOf(judged, "dK"));
  EXPECT_TRUE(judgementsOf(json("not tensors")).empty());
}

TEST(Judgements, KnownIssuesKeepOnlyEntriesOfText) {
  const json issues = json::parse(R"([
    {"id": "flash-attention#1", "title": "t", "fix": "f", "url": "u", "status": "open", "workaround": "w", "extra": 1},
    {"id": "x", "title": 5},
    "not an entry"
  ])");
  const std::vector<KnownIssueNote> notes = knownIssueNotesOf(issues);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].id, "flash-attention#1");
  EXPECT_EQ(notes[0].workaround, "w");
  EXPECT_TRUE(knownIssueNotesOf(json::object()).empty());
}

}  // namespace
}  // namespace nanprov::report
