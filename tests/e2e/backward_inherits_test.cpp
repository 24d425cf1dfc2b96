// End-to-end on the CPU: a backward takes its forward's counts for the tensors it passes on
// unchanged (Q, K, V, O, LSE; probes/libtorch/forward_checks.h) instead of reading them again.
// The proof that the edge rule stays exact: the same training with every backward reading all
// its tensors (NANPROV_BACKWARD_REREAD=1) records the very same counts for every tensor of every
// call, finds the same first edge, and trains to the same losses.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

using CallKey = std::tuple<int64_t, int64_t, std::string, int64_t>;  // step, layer, phase, call

// Every call's tensors as `calls --json` gives them, by the call's place in the run.
std::map<CallKey, json> tensorsByCall(const fs::path& dir) {
  std::map<CallKey, json> out;
  for (const json& c : commandJson("calls", dir)) {
    out[{c["step"].get<int64_t>(), c["layer"].get<int64_t>(), c["phase"].get<std::string>(),
         c["call"].get<int64_t>()}] = c["tensors"];
  }
  return out;
}

// The losses the training printed (tiny_transformer.py --print-losses), in full.
std::vector<std::string> losses(const std::string& out) { return allMatches(out, "rank\\d+ step\\d+ loss \\S+"); }

std::string meta(const fs::path& dir, const std::string& key) {
  json rows = commandJson("sql", dir, "\"SELECT value FROM meta WHERE key = '" + key + "'\"");
  return rows.is_array() && rows.size() == 1 ? rows[0]["value"].get<std::string>() : "";
}

TEST(BackwardInherits, ItsCountsAreThoseOfAFreshReadAndTheEdgeIsTheSame) {
  // Layer 1's forward output goes NaN at step 1: its backward then passes a non-finite O on,
  // which must keep that backward from being an edge of its own.
  const std::string inject = "--inject 'layer=1,phase=fwd,tensor=O,step=1'";
  const std::string args = "--steps 3 --print-losses";
  TrainedRun inherited = train("inherit-on", inject, args);
  TrainedRun reread;
  {
    ScopedEnv off("NANPROV_BACKWARD_REREAD", "1");
    reread = train("inherit-off", inject, args);
  }
  ASSERT_TRUE(inherited.doc.is_object()) << inherited.train.out << inherited.report.out;
  ASSERT_TRUE(reread.doc.is_object()) << reread.train.out << reread.report.out;

  // Inherited on: 5 tensors (Q, K, V, O, LSE) of each backward; off: none.
  const std::string count = meta(inherited.dir, "backward_inherited");
  ASSERT_FALSE(count.empty()) << "no backward took its forward's counts";
  json backwards = commandJson("calls", inherited.dir, "--phase bwd");
  EXPECT_EQ(std::stoll(count), 5 * static_cast<int64_t>(backwards.size())) << backwards.size() << " backwards";
  EXPECT_EQ(meta(reread.dir, "backward_inherited"), "");

  const std::map<CallKey, json> a = tensorsByCall(inherited.dir), b = tensorsByCall(reread.dir);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GE(a.size(), 12u);
  for (const auto& [key, tensors] : a) {
    ASSERT_EQ(b.count(key), 1u);
    EXPECT_EQ(tensors, b.at(key)) << "step " << std::get<0>(key) << " layer " << std::get<1>(key) << " "
                                  << std::get<2>(key) << " call " << std::get<3>(key);
  }

  const json& edge = inherited.doc["first_edge"];
  EXPECT_EQ(edge["phase"], "fwd") << edge.dump(1);
  EXPECT_EQ(edge["layer"], 1) << edge.dump(1);
  EXPECT_EQ(edge["step"], 1) << edge.dump(1);
  EXPECT_EQ(edge["name"], reread.doc["first_edge"]["name"]);
  EXPECT_EQ(edge["tensors"], reread.doc["first_edge"]["tensors"]);
  EXPECT_EQ(inherited.report.code, reread.report.code);
  // The probes only read: the losses are bit for bit those of the run that read everything.
  const std::vector<std::string> trained = losses(inherited.train.out);
  EXPECT_EQ(trained.size(), 3u) << inherited.train.out;
  EXPECT_EQ(trained, losses(reread.train.out));
}

}  // namespace
