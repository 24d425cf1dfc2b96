// End-to-end: deferred checks (probes/libtorch/device_checks.h) on the CPU. With
// NANPROV_DEFER_CHECKS=2 CPU calls are deferred through the same code as CUDA calls (batches,
// version counters, fallbacks) and measured on the host at the flush. A
// tensor changed in place between its call and the deferred check must be said so, and never
// reported clean; its signature goes back to immediate checks.
#include <gtest/gtest.h>

#include <set>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string script() { return std::string(NANPROV_TEST_SCRIPTS) + "/inplace_grad_scale.py"; }

std::set<std::string> rolesOf(const json& call) {
  std::set<std::string> roles;
  for (const json& t : call["tensors"]) roles.insert(t["role"].get<std::string>());
  return roles;
}

// The losses the script printed, in full.
std::vector<std::string> losses(const std::string& out) { return allMatches(out, "step \\d+: loss [-0-9.e+]+"); }

// The backward of step 0 is deferred to the step boundary; meanwhile the identity Function's
// backward doubled its dQ in place. The call is marked, its dQ left out, the run not called clean;
// from step 1 on the signature is checked at once (before the doubling), so dQ is there again.
TEST(DeferredChecks, GradientChangedInPlaceIsMarkedNotClean) {
  ScopedEnv cpu_too("NANPROV_DEFER_CHECKS", "2");
  TrainedRun r = train("defer-inplace", "", "3", script());
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  ASSERT_TRUE(r.doc.is_object()) << r.report.out;
  json bwd = commandJson("calls", r.dir, "--phase bwd");
  ASSERT_EQ(bwd.size(), 3u) << bwd.dump();
  EXPECT_EQ(bwd[0]["step"], 0);
  EXPECT_EQ(bwd[0]["modified_before_check"], "dQ") << bwd[0].dump();
  EXPECT_EQ(rolesOf(bwd[0]).count("dQ"), 0u) << "a changed tensor's counts are left out, never clean";
  EXPECT_EQ(rolesOf(bwd[0]).count("dK"), 1u) << "the call is judged on the rest";
  for (size_t i = 1; i < bwd.size(); ++i) {
    EXPECT_TRUE(bwd[i]["modified_before_check"].is_null()) << bwd[i].dump();
    EXPECT_EQ(rolesOf(bwd[i]).count("dQ"), 1u) << "checked at once after the fallback: " << bwd[i].dump();
  }
  for (const json& c : commandJson("calls", r.dir, "--phase fwd")) {
    EXPECT_TRUE(c["modified_before_check"].is_null()) << c.dump();
    EXPECT_EQ(rolesOf(c).count("O"), 1u) << c.dump();
  }
  json marked = commandJson("sql", r.dir, "\"SELECT step, phase, modified FROM calls WHERE modified IS NOT NULL\"");
  ASSERT_EQ(marked.size(), 1u) << marked.dump();
  EXPECT_EQ(marked[0]["modified"], "dQ");
  EXPECT_EQ(marked[0]["phase"], "bwd");
  EXPECT_NE(r.doc["outcome"], "clean") << r.report.out;
  bool said = false;
  for (const json& u : r.doc["coverage"]["unprobed"]) {
    said = said ||
           (u["what"].get<std::string>().find("changed in place before their deferred check") != std::string::npos &&
            u["count"] == 1);
  }
  EXPECT_TRUE(said) << r.doc["coverage"].dump();
  json meta = commandJson("sql", r.dir, "\"SELECT value FROM meta WHERE key = 'deferred_checks'\"");
  ASSERT_EQ(meta.size(), 1u) << meta.dump();
  const std::string stats = meta[0]["value"];
  EXPECT_NE(stats.find("modified before their check 1,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("immediate after a fallback 2"), std::string::npos) << stats;
  EXPECT_NE(stats.find("deferred 4, batched launches 0,"), std::string::npos)
      << "step 0's two calls and the forwards of steps 1 and 2; the CPU launches nothing: " << stats;
}

// NANPROV_DEFER_CHECKS=0 checks every call at the call, before the doubling: nothing is marked,
// every dQ is there, and the losses are bit for bit those of the deferred run.
TEST(DeferredChecks, ImmediateChecksSeeTheCallsOwnValuesAndLossesMatch) {
  TrainedRun deferred;
  {
    ScopedEnv cpu_too("NANPROV_DEFER_CHECKS", "2");
    deferred = train("defer-on", "", "3", script());
  }
  TrainedRun immediate;
  {
    ScopedEnv off("NANPROV_DEFER_CHECKS", "0");
    immediate = train("defer-off", "", "3", script());
  }
  ASSERT_EQ(immediate.train.code, runCodeForCleanExit(immediate)) << immediate.train.out;
  json bwd = commandJson("calls", immediate.dir, "--phase bwd");
  ASSERT_EQ(bwd.size(), 3u) << bwd.dump();
  for (const json& c : bwd) {
    EXPECT_TRUE(c["modified_before_check"].is_null()) << c.dump();
    EXPECT_EQ(rolesOf(c).count("dQ"), 1u) << c.dump();
  }
  EXPECT_EQ(immediate.doc["outcome"], "clean") << immediate.report.out;
  json meta = commandJson("sql", immediate.dir, "\"SELECT value FROM meta WHERE key = 'deferred_checks'\"");
  ASSERT_EQ(meta.size(), 1u);
  EXPECT_EQ(meta[0]["value"], "off (NANPROV_DEFER_CHECKS=0)");
  const std::vector<std::string> a = losses(deferred.train.out), b = losses(immediate.train.out);
  ASSERT_EQ(a.size(), 3u) << deferred.train.out;
  EXPECT_EQ(a, b);
}

// A deferred call that is not clean is found and captured as an immediate one is: the same first
// edge, with its capture written from the tensors held until the batch's results were known.
TEST(DeferredChecks, DeferredEdgeIsTheImmediateOneAndIsCaptured) {
  const std::string inject = "--inject 'layer=1,phase=bwd,tensor=dQ,step=1'";
  TrainedRun immediate;
  {
    ScopedEnv off("NANPROV_DEFER_CHECKS", "0");
    immediate = train("defer-edge-off", inject, "--steps 3");
  }
  ScopedEnv cpu_too("NANPROV_DEFER_CHECKS", "2");
  TrainedRun deferred = train("defer-edge-on", inject, "--steps 3");
  ASSERT_EQ(deferred.report.code, 1) << deferred.train.out;
  ASSERT_EQ(immediate.report.code, 1) << immediate.train.out;
  const json& e = deferred.doc["first_edge"];
  EXPECT_EQ(e["name"], immediate.doc["first_edge"]["name"]);
  EXPECT_EQ(e["nonfinite_outputs"], immediate.doc["first_edge"]["nonfinite_outputs"]);
  EXPECT_TRUE(e["modified_before_check"].is_null()) << "injected before the versions are read: " << e.dump();
  ASSERT_TRUE(e["capture"].is_string()) << e.dump(1);
  EXPECT_TRUE(fs::exists(e["capture"].get<std::string>())) << e["capture"];
  json meta = commandJson("sql", deferred.dir, "\"SELECT value FROM meta WHERE key = 'deferred_checks'\"");
  ASSERT_EQ(meta.size(), 1u);
  EXPECT_NE(meta[0]["value"].get<std::string>().find("modified before their check 0,"), std::string::npos)
      << meta.dump();
}

}  // namespace
