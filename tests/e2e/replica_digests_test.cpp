// End-to-end: replica digests (issue 64 item 3) on real DDP training over gloo under torchrun.
// One rank flips one mantissa bit of one parameter at step 4, after backward and before its
// optimizer step, as a faulty device might: every value stays finite, and only comparing the
// replicas' parameters sees it. The training prints what it flipped (the oracle); the report must
// name that step, that rank (by majority with 3 replicas; with 2, both) and that parameter.
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string torchrun() { return (fs::path(python()).parent_path() / "torchrun").string(); }

const std::string kGloo = "GLOO_SOCKET_IFNAME=lo ";

Result trainUnderTorchrun(const fs::path& dir, int ranks, const std::string& args) {
  return sh(kGloo + nanprov() + " run --out " + dir.string() + " -- " + torchrun() + " --standalone --nproc-per-node=" +
            std::to_string(ranks) + " " + example("tiny_transformer.py") + " " + args + " 2>&1");
}

// What the training flipped, from its own line: "flipped bit 20 of head.weight[0] on rank 1 at step 4: ...".
struct Flip {
  std::string parameter;
  int rank = -1;
  int64_t step = -1;
};
Flip flipOf(const std::string& out) {
  std::smatch m;
  Flip f;
  if (std::regex_search(out, m, std::regex(R"(flipped bit \d+ of (\S+)\[0\] on rank (\d+) at step (\d+))"))) {
    f.parameter = m[1];
    f.rank = std::stoi(m[2]);
    f.step = std::stoll(m[3]);
  }
  return f;
}

json reportJson(const fs::path& dir, int expected_code) {
  Result rep = sh(nanprov() + " report " + dir.string() + " --json");
  EXPECT_EQ(rep.code, expected_code) << rep.out;
  json doc = json::parse(rep.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << rep.out;
  return doc.is_discarded() ? json::object() : doc;
}

// `ranks` DDP replicas, rank `flipped` flipping its bit at step 4 of 6.
void expectTheFlipIsNamed(int ranks, int flipped) {
  const fs::path dir = runDir("replicas-" + std::to_string(ranks) + "-flip-" + std::to_string(flipped));
  Result t =
      trainUnderTorchrun(dir, ranks, "--steps 6 --ddp --flip-bit-step 4 --flip-bit-rank " + std::to_string(flipped));
  ASSERT_EQ(t.code, 7) << "the training exits 0; its replicas diverged: " << t.out;
  const Flip flip = flipOf(t.out);
  ASSERT_EQ(flip.rank, flipped) << t.out;
  ASSERT_EQ(flip.step, 4) << t.out;
  expectEveryRankRecorded(t.out);
  json doc = reportJson(dir, 7);
  EXPECT_EQ(doc["outcome"], "replica_divergence");
  EXPECT_EQ(doc["clean"], false);
  EXPECT_EQ(doc["first_edge"], nullptr) << "every value stayed finite";
  const json& r = doc["replicas"];
  EXPECT_EQ(r["checked"], true) << r.dump();
  std::vector<int> all;
  for (int i = 0; i < ranks; ++i) all.push_back(i);
  EXPECT_EQ(r["ranks"], json(all)) << r.dump();
  EXPECT_EQ(r["steps"], 6) << r.dump();
  const json& d = r["first_divergence"];
  ASSERT_TRUE(d.is_object()) << r.dump();
  EXPECT_EQ(d["step"], flip.step);
  EXPECT_EQ(d["parameter"], flip.parameter);
  if (ranks >= 3) {
    EXPECT_EQ(d["rank"], flip.rank) << d.dump();
    EXPECT_EQ(d["ranks"], json::array({flip.rank})) << d.dump();
  } else {
    EXPECT_EQ(d["rank"], nullptr) << "two replicas: either may be wrong";
    EXPECT_EQ(d["ranks"], json(all)) << d.dump();
  }
  // People read it in the first line, and nanprov run printed it when the training ended.
  Result text = sh(nanprov() + " report " + dir.string());
  const std::string headline = text.out.substr(0, text.out.find('\n'));
  EXPECT_NE(headline.find("replicas diverged at step 4"), std::string::npos) << text.out;
  EXPECT_NE(headline.find(flip.parameter), std::string::npos) << text.out;
  EXPECT_NE(t.out.find("replicas diverged at step 4"), std::string::npos) << t.out;
  // A scheduler reads a suspected device, and for 3 replicas which rank's.
  Result v = sh(nanprov() + " verdict " + dir.string() + " --json");
  EXPECT_EQ(v.code, 12) << v.out;
  json verdict = json::parse(v.out, nullptr, false);
  EXPECT_EQ(verdict["verdict"], "suspect_device") << v.out;
  EXPECT_EQ(verdict["reason"], "replica-divergence") << v.out;
  EXPECT_EQ(verdict["step"], 4) << v.out;
  EXPECT_EQ(verdict["rank"], ranks >= 3 ? json(flipped) : json(nullptr)) << v.out;
  std::vector<int> suspects;
  for (const json& s : verdict["suspects"]) suspects.push_back(s["rank"].get<int>());
  EXPECT_EQ(suspects, ranks >= 3 ? std::vector<int>{flipped} : all) << v.out;
}

TEST(ReplicaDigests, ThreeDdpRanksNameTheRankThatFlippedABit) { expectTheFlipIsNamed(3, 1); }

// Whichever rank it is: rank 0 too (and the parameter, from the training's own line).
TEST(ReplicaDigests, ThreeDdpRanksNameRankZeroWhenItFlippedABit) { expectTheFlipIsNamed(3, 0); }

TEST(ReplicaDigests, TwoDdpRanksNameBothRanks) { expectTheFlipIsNamed(2, 1); }

// The control: the same training without the flip. Replicas were compared and agreed.
TEST(ReplicaDigests, CleanDdpRunComparesReplicasAndFindsNoDivergence) {
  const fs::path dir = runDir("replicas-clean");
  Result t = trainUnderTorchrun(dir, 3, "--steps 6 --ddp");
  ASSERT_EQ(t.code, 0) << t.out;
  json doc = reportJson(dir, 0);
  EXPECT_EQ(doc["outcome"], "clean");
  const json& r = doc["replicas"];
  EXPECT_EQ(r["checked"], true) << r.dump();
  EXPECT_EQ(r["ranks"], json::array({0, 1, 2})) << r.dump();
  EXPECT_EQ(r["steps"], 6) << r.dump();
  EXPECT_EQ(r["first_divergence"], nullptr) << r.dump();
  EXPECT_NE(t.out.find("replicas: ranks 0, 1, 2 compared after each of 6 steps: bit for bit equal"), std::string::npos)
      << t.out;
  // Every rank digested every parameter at every step, named as the model names them (without
  // DDP's `module.`), as nanprov sql shows them.
  Result rows =
      sh(nanprov() + " sql " + dir.string() +
         " \"SELECT COUNT(DISTINCT step) AS steps, SUM(parameter LIKE 'module.%') AS wrapped, "
         "COUNT(DISTINCT parameter) = COUNT(*) / 6 AS every_step FROM replica_digests WHERE rank = 2\" --json");
  EXPECT_EQ(rows.code, 0) << rows.out;
  EXPECT_EQ(json::parse(rows.out, nullptr, false), json::parse(R"([{"steps": 6, "wrapped": 0, "every_step": 1}])"))
      << rows.out;
}

// HSDP (FSDP2 over a 2-D mesh): 4 ranks, shards of 2 ranks replicated twice. Ranks 0 and 2 hold
// one shard, 1 and 3 the other; rank 2 flips a bit of its own shard of the head's weight at step
// 4. Its replica group is ranks 0 and 2: two replicas, so both are named; 1 and 3 agree.
TEST(ReplicaDigests, HsdpComparesEachShardsReplicasAndNamesTheGroupThatDiverged) {
  const fs::path dir = runDir("replicas-hsdp");
  Result t = trainUnderTorchrun(dir, 4, "--steps 6 --fsdp2 --hsdp --flip-bit-step 4 --flip-bit-rank 2");
  ASSERT_EQ(t.code, 7) << "the training exits 0; its replicas diverged: " << t.out;
  const Flip flip = flipOf(t.out);
  ASSERT_EQ(flip.rank, 2) << t.out;
  json doc = reportJson(dir, 7);
  EXPECT_EQ(doc["outcome"], "replica_divergence");
  const json& r = doc["replicas"];
  EXPECT_EQ(r["checked"], true) << r.dump();
  EXPECT_EQ(r["sharded"], false) << "every shard is replicated: " << r.dump();
  EXPECT_EQ(r["groups"], json::parse("[[0, 2], [1, 3]]")) << r.dump();
  EXPECT_EQ(r["steps"], 6) << r.dump();
  const json& d = r["first_divergence"];
  ASSERT_TRUE(d.is_object()) << r.dump();
  EXPECT_EQ(d["step"], flip.step);
  EXPECT_EQ(d["ranks"], json::array({0, 2})) << d.dump();
  EXPECT_EQ(d["rank"], nullptr) << d.dump();
  EXPECT_EQ(d["parameter"], flip.parameter);
}

// FSDP2 shards every parameter: nothing replicated is compared, and the report says so.
TEST(ReplicaDigests, Fsdp2RunSaysReplicasWereNotCompared) {
  const fs::path dir = runDir("replicas-fsdp2");
  Result t = trainUnderTorchrun(dir, 2, "--steps 3 --fsdp2");
  ASSERT_EQ(t.code, 0) << t.out;
  json doc = reportJson(dir, 0);
  const json& r = doc["replicas"];
  EXPECT_EQ(r["checked"], false) << r.dump();
  EXPECT_EQ(r["sharded"], true) << r.dump();
  EXPECT_EQ(r["reason"], "the parameters are sharded (FSDP, DTensor)") << r.dump();
  EXPECT_EQ(r["first_divergence"], nullptr);
  EXPECT_NE(t.out.find("replicas: not compared: the parameters are sharded (FSDP, DTensor)"), std::string::npos)
      << t.out;
}

}  // namespace
