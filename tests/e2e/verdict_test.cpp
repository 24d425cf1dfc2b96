// End-to-end: `nanprov verdict` on real CPU training under `nanprov run` (issue 64 items 2 and 4):
// one exit code per class of fault, one JSON object with the call and the device it ran on. The
// classes come from the report and the replay engine's reruns of the capture, nothing mocked.
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

struct Verdict {
  Result result;
  json doc;
};

// `nanprov verdict RUN <args> --json`, parsed, with its exit code.
Verdict verdict(const fs::path& dir, const std::string& args = "") {
  Verdict v;
  v.result = sh(nanprov() + " verdict " + dir.string() + " " + args + " --json");
  v.doc = json::parse(v.result.out, nullptr, false);
  return v;
}

std::string hostName() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

// The meta value `key` of the run's rank-0 store, as `nanprov sql` reads it.
std::string metaOf(const fs::path& dir, const std::string& key) {
  json rows = json::parse(
      sh(nanprov() + " sql " + dir.string() + " \"SELECT value FROM meta WHERE key = '" + key + "'\" --json").out,
      nullptr, false);
  if (!rows.is_array() || rows.empty()) return "";
  const json& row = rows.front();
  const json& value = row.is_object() ? row["value"] : row.front();
  return value.is_string() ? value.get<std::string>() : "";
}

// A CPU run names its host and "cpu", never a GPU's facts.
void expectThisHostsCpu(const json& id) {
  EXPECT_EQ(id["host"], hostName()) << id.dump(1);
  EXPECT_EQ(id["device"], "cpu") << id.dump(1);
  for (const char* gpu_field : {"gpu", "gpu_uuid", "pci_bus_id", "driver", "cudnn"})
    EXPECT_EQ(id[gpu_field], nullptr) << gpu_field;
}

TEST(Verdict, ACleanRunIsNoFaultAndItsStoreNamesItsHost) {
  TrainedRun r = train("verdict-clean", "", "--steps 3");
  ASSERT_EQ(r.report.code, 0) << r.train.out;
  EXPECT_EQ(metaOf(r.dir, "host"), hostName());
  EXPECT_EQ(metaOf(r.dir, "described_device"), "cpu") << "the probes said which device they described";
  Verdict v = verdict(r.dir);
  ASSERT_EQ(v.result.code, 0) << v.result.out;
  ASSERT_TRUE(v.doc.is_object()) << v.result.out;
  expectFields(v.doc, {{"verdict", "no_fault"},
                       {"exit_code", 0},
                       {"action", "none"},
                       {"reason", "clean"},
                       {"rank", nullptr},
                       {"root_cause", nullptr}});
  Result line = sh(nanprov() + " verdict " + r.dir.string());
  EXPECT_EQ(line.code, 0);
  EXPECT_EQ(line.out.rfind("no_fault (exit 0, none): ", 0), 0u) << line.out;
  EXPECT_EQ(sh(nanprov() + " verdict " + r.dir.string() + " --reruns 0 2>&1").code, 2)
      << "a usage error is its own code";
}

// An injected NaN: the run's process and replay rerun the call and never see it, every rerun the
// same bits, as a bad device would give; but it was injected, a drill, so the verdict is
// undetermined (exit 14, inspect) and says so, never "exclude the node". The report names the host
// beside the edge, in its text and its JSON.
TEST(Verdict, AnInjectedNaNIsNotReproducibleAndNeverExcludesTheNode) {
  TrainedRun r = train("verdict-inject", "--inject 'layer=0,phase=fwd,tensor=O,step=1,value=nan'", "--steps 3");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& edge = r.doc["first_edge"];
  expectThisHostsCpu(edge["device_identity"]);
  EXPECT_NE(r.train.out.find("  on host " + hostName() + ", cpu\n"), std::string::npos) << r.train.out;

  Verdict v = verdict(r.dir, "--reruns 3");
  ASSERT_EQ(v.result.code, 14) << v.result.out << "\n(14: undetermined)";
  expectFields(v.doc, {{"verdict", "undetermined"},
                       {"exit_code", 14},
                       {"action", "inspect"},
                       {"reason", "injected"},
                       {"outcome", "edge"},
                       {"injected", true},
                       {"rank", 0},
                       {"step", 1},
                       {"call", edge["name"]},
                       {"phase", "fwd"},
                       {"capture", edge["capture"]}});
  expectThisHostsCpu(v.doc["device_identity"]);
  EXPECT_EQ(v.doc["root_cause"]["class"], "not-reproduced");
  EXPECT_EQ(v.doc["reruns"]["runs"], 3) << "--reruns reaches replay: " << v.doc["reruns"].dump(1);
  EXPECT_EQ(v.doc["reruns"]["reproduced"], 0);
  EXPECT_EQ(v.doc["reruns"]["in_run"]["reproduced"], 0) << "nor in the run's own reruns";
  Result line = sh(nanprov() + " verdict " + r.dir.string());
  EXPECT_EQ(line.code, 14);
  EXPECT_EQ(line.out.rfind("undetermined (exit 14, inspect): " + edge["name"].get<std::string>() +
                               ", step 1, on host " + hostName() + ", cpu: ",
                           0),
            0u)
      << line.out;
  EXPECT_NE(line.out.find("injected"), std::string::npos) << line.out;
}

// The flaky library op of Replay.AFlakyLibraryOpRerunInTheRunIsNondeterministic: the run's own
// reruns find its NaN in 10 of 20: a nondeterministic kernel, requeue (exit 11).
TEST(Verdict, AFlakyLibraryOpIsANondeterministicKernel) {
  const fs::path dir = runDir("verdict-flaky-op");
  Result run = sh(nanprov() + " run --out " + dir.string() + " --reruns 20 --probe-op 'flaky::attn:q=Q,k=K,v=V' -- " +
                  python() + " " + NANPROV_TEST_SCRIPTS + "/flaky_library_op.py 2>&1");
  ASSERT_EQ(run.code, 1) << run.out;
  Verdict v = verdict(dir);
  ASSERT_EQ(v.result.code, 11) << v.result.out << "\n(11: nondeterministic kernel)";
  expectFields(v.doc, {{"verdict", "nondeterministic_kernel"},
                       {"exit_code", 11},
                       {"action", "requeue"},
                       {"reason", "nondeterministic"},
                       {"op", "flaky::attn"},
                       {"injected", false},
                       {"rank", 0}});
  EXPECT_EQ(v.doc["reruns"]["in_run"]["runs"], 20) << v.doc["reruns"].dump(1);
  EXPECT_EQ(v.doc["reruns"]["in_run"]["reproduced"], 10) << v.doc["reruns"].dump(1);
  expectThisHostsCpu(v.doc["device_identity"]);
}

// A real overflow inside attention from finite inputs of 1e20 (no injection): every float32 backend
// fails alike and the float64 reference does not: the data or the model, fix it (exit 13).
TEST(Verdict, AnOverflowFromTheDataIsTheDataOrTheModel) {
  TrainedRun r = train("verdict-overflow", "", "--steps 4 --glitch-step 2 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  Verdict v = verdict(r.dir);
  ASSERT_EQ(v.result.code, 13) << v.result.out << "\n(13: the data or the model)";
  expectFields(v.doc, {{"verdict", "data_or_model"},
                       {"exit_code", 13},
                       {"action", "fix_code"},
                       {"reason", "precision-limit"},
                       {"injected", false},
                       {"step", 2},
                       {"call", r.doc["first_edge"]["name"]}});
  expectThisHostsCpu(v.doc["device_identity"]);
}

}  // namespace
