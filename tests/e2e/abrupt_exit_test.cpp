// End-to-end: a training that ends abruptly keeps what it recorded, and `nanprov run`'s exit code
// tells a CI job what nanprov found. Real CPU training under `nanprov run`, then `report`.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// os._exit(7), C's exit(7) and SIGTERM, right after step 2 of 5, run no Python exit hook: every
// call of the three steps still reaches the store, and the store is closed whole (no WAL left).
TEST(AbruptExit, EveryCallIsStoredWhenTheProcessEndsWithoutExitHooks) {
  struct Case {
    std::string how;
    int code;
  };
  for (const Case& c : std::vector<Case>{{"os_exit", 7}, {"c_exit", 7}, {"sigterm", 128 + 15}}) {
    SCOPED_TRACE(c.how);
    TrainedRun r = train("abrupt-" + c.how, "", "--steps 5 --die-after-step 2 --die-how " + c.how);
    EXPECT_EQ(r.train.code, c.code) << r.train.out;
    EXPECT_EQ(r.doc["summary"]["calls"], 12) << "3 steps x 2 layers x fwd+bwd: " << r.report.out;
    EXPECT_EQ(r.doc["coverage"]["calls_not_stored"], 0) << r.report.out;
    EXPECT_FALSE(fs::exists(r.dir / "rank-0.sqlite-wal")) << "the store was closed, not abandoned";
  }
}

// SIGKILL leaves no chance to flush: the calls still queued are lost, and the report says how many.
TEST(AbruptExit, CallsLostToSigkillAreCountedInTheReport) {
  TrainedRun r = train("abrupt-sigkill", "", "--steps 5 --die-after-step 2 --die-how sigkill-mid-step");
  EXPECT_EQ(r.train.code, 128 + 9) << r.train.out;
  EXPECT_EQ(r.doc["summary"]["calls"], 12) << "the three finished steps were flushed at their boundaries";
  EXPECT_EQ(r.doc["coverage"]["calls_not_stored"], 2) << "the forward pass after step 2: one call per layer";
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("the last 2 calls were not stored"), std::string::npos) << text.out;
}

// Real training loops keep going on a NaN loss and exit 0: `nanprov run` then exits 1, as
// `report` does, unless --warn-only; a clean run exits 0.
TEST(AbruptExit, ARunThatWentNonFiniteFailsUnlessWarnOnly) {
  TrainedRun edge = train("exit-edge", "", "--steps 3 --glitch-step 1");
  EXPECT_EQ(edge.report.code, 1) << edge.report.out;
  EXPECT_EQ(edge.train.code, 1) << "the training exited 0, nanprov found an edge: " << edge.train.out;
  TrainedRun warned = train("exit-warn-only", "--warn-only", "--steps 3 --glitch-step 1");
  EXPECT_EQ(warned.report.code, 1) << warned.report.out;
  EXPECT_EQ(warned.train.code, 0) << warned.train.out;
  TrainedRun clean = train("exit-clean", "", "--steps 2");
  EXPECT_EQ(clean.report.code, 0) << clean.report.out;
  EXPECT_EQ(clean.train.code, 0) << clean.train.out;
}

}  // namespace
