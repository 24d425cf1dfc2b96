// End-to-end: the rank is the process group's, whatever launched the job (issue 47). Ranks train
// DDP over gloo on the CPU, started the ways launchers that set no RANK start them: srun's task
// variables, torch.multiprocessing.spawn, and a hand-written subprocess launcher
// (tests/e2e/scripts/launch_ranks.py). Rank 1's batch at step 3 overflows its first attention
// (tiny_transformer.py --glitch-rank 1); the ground truth is the script's own forward hooks
// (--oracle), which read the rank from the process group too.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kGloo = "GLOO_SOCKET_IFNAME=lo ";

std::string launch(const std::string& mode, int ranks, const std::string& extra = "") {
  return python() + " " + std::string(NANPROV_TEST_SCRIPTS) + "/launch_ranks.py " + mode + " " + std::to_string(ranks) +
         " " + example("tiny_transformer.py") + " --steps 5 --glitch-step 3 --glitch-rank 1" + extra;
}

// Every rank recorded under its own name, by its own process, and none left under a process's.
void expectOneStorePerRank(const fs::path& dir, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    fs::path store = dir / ("rank-" + std::to_string(r) + ".sqlite");
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(store))) << store << " is not its rank's own file";
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_NE(entry.path().filename().string().rfind("process-", 0), 0u) << entry.path() << " left behind";
  }
  Result pids = sh(nanprov() + " sql " + dir.string() + " \"SELECT rank, value FROM meta WHERE key = 'pid'\" --json");
  json rows = json::parse(pids.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << pids.out;
  std::set<std::string> distinct;
  for (const json& row : rows) distinct.insert(row["value"].get<std::string>());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(ranks)) << "one process per rank: " << pids.out;
}

// `training` glitches rank 1's first attention at step 3 and prints the ground truth (--oracle).
void expectRankOneFound(const fs::path& dir, const std::string& training, int ranks) {
  Result t = sh(kGloo + nanprov() + " run --out " + dir.string() + " -- " + training + " 2>&1");
  ASSERT_EQ(t.code, 1) << "the training exits 0; nanprov found the edge: " << t.out;
  expectEveryRankRecorded(t.out);
  std::smatch oracle;
  ASSERT_TRUE(std::regex_search(t.out, oracle, std::regex("oracle: rank (\\d+) step (\\d+) module (\\S+)"))) << t.out;
  ASSERT_EQ(oracle[1].str(), "1") << "the glitch is rank 1's: " << t.out;
  json doc = reportOfEveryRank(dir, ranks);
  expectFields(doc["first_edge"], {{"rank", 1},
                                   {"step", std::stoi(oracle[2].str())},
                                   {"phase", "fwd"},
                                   {"layer", 0},
                                   {"module", oracle[3].str()},
                                   {"origin", "attention"},
                                   {"inputs_finite", true}});
  expectOneStorePerRank(dir, ranks);
}

void expectRankOneFound(const std::string& mode, int ranks) {
  expectRankOneFound(runDir("launch-" + mode + "-" + std::to_string(ranks)), launch(mode, ranks, " --oracle"), ranks);
}

TEST(ProcessGroupRank, SrunStyleTwoTasks) { expectRankOneFound("slurm", 2); }
TEST(ProcessGroupRank, SrunStyleFourTasks) { expectRankOneFound("slurm", 4); }
TEST(ProcessGroupRank, MultiprocessingSpawn) { expectRankOneFound("spawn", 2); }
TEST(ProcessGroupRank, HandWrittenSubprocessLauncher) { expectRankOneFound("subprocess", 2); }

// Attention that ran before the group came up belongs to the process, and becomes its rank's: rank
// 1's no-grad forward before init_process_group is in rank 1's store, under rank 1.
TEST(ProcessGroupRank, CallsBeforeTheGroupBecomeTheRanksRows) {
  fs::path dir = runDir("launch-before-group");
  Result t = sh(kGloo + nanprov() + " run --out " + dir.string() + " -- " +
                launch("subprocess", 2, " --forward-before-group") + " 2>&1");
  ASSERT_EQ(t.code, 1) << t.out;
  EXPECT_EQ(t.out.find("already exists"), std::string::npos) << t.out;
  expectOneStorePerRank(dir, 2);
  Result q =
      sh(nanprov() + " sql " + dir.string() +
         " \"SELECT rank, COUNT(*) AS calls, MIN(step) AS first FROM calls GROUP BY rank ORDER BY rank\" --json");
  json rows = json::parse(q.out, nullptr, false);
  ASSERT_TRUE(rows.is_array() && rows.size() == 2u) << q.out;
  // 2 layers: the early forward's 2 calls, then 5 steps of forward and backward (rank 1's stop at
  // nothing: the glitch makes NaN, not an exception).
  EXPECT_EQ(rows[0]["calls"], rows[1]["calls"]) << q.out;
  EXPECT_EQ(rows[1]["rank"], 1) << q.out;
  Result meta =
      sh(nanprov() + " sql " + dir.string() + " \"SELECT rank, value FROM meta WHERE key = 'rank_source'\" --json");
  json sources = json::parse(meta.out, nullptr, false);
  ASSERT_TRUE(sources.is_array() && sources.size() == 2u) << meta.out;
  for (const json& s : sources) EXPECT_EQ(s["value"], "process_group") << meta.out;
}

// Rank 1 trains without its recording (its launcher passed no environment, as srun --export=NONE
// does) and makes the NaN; rank 0 receives it through DDP's all-reduce. Rank 0's store alone must
// not answer "outside attention": it names the rank that was not checked, and the collective.
// `extra`: the training's further arguments (its device).
void expectUnrecordedRankNamedThroughTheCollective(const std::string& name, const std::string& extra) {
  fs::path dir = runDir(name);
  const std::string training = python() + " " + std::string(NANPROV_TEST_SCRIPTS) +
                               "/launch_ranks.py subprocess 2 --unrecorded 1 " + example("tiny_transformer.py") +
                               " --steps 5 --glitch-step 3 --glitch-rank 1 --oracle" + extra;
  Result t = sh(kGloo + nanprov() + " run --out " + dir.string() + " -- " + training + " 2>&1");
  ASSERT_NE(t.out.find("oracle: rank 1 step 3"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("rank 1 of world size 2 has no store"), std::string::npos) << t.out;
  Result rep = sh(nanprov() + " report " + dir.string() + " --json");
  EXPECT_EQ(rep.code, 1) << "non-finite values were seen: " << rep.out;
  json doc = json::parse(rep.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << rep.out;
  EXPECT_NE(doc["outcome"], "outside_attention") << rep.out;
  EXPECT_NE(doc["outcome"], "clean") << rep.out;
  EXPECT_EQ(doc["outcome"], "unattributed") << "values went non-finite where nanprov did not check: " << rep.out;
  EXPECT_EQ(doc["world_size"], 2) << rep.out;
  EXPECT_EQ(doc["missing_ranks"], json::array({1})) << rep.out;
  ASSERT_EQ(doc["collective_paths"].size(), 1u) << rep.out;
  expectFields(doc["collective_paths"][0],
               {{"rank", 0}, {"step", 3}, {"op", "c10d::allreduce_"}, {"made_by_collective", false}});
  EXPECT_EQ(doc["ranks"][0]["meta"]["host_syncs"], "0") << rep.out;
}

TEST(ProcessGroupRank, ARankNotRecordedIsNeverAnsweredOutsideAttention) {
  expectUnrecordedRankNamedThroughTheCollective("launch-unrecorded", "");
}

// The same with CUDA tensors (two ranks on one GPU; gloo's all-reduce takes them): the collective's
// input and output are read by the device checks, and their counts come back with no host sync.
TEST(Gpu, ARankNotRecordedIsNamedThroughACollectiveOfCudaTensors) {
  REQUIRE_CUDA();
  expectUnrecordedRankNamedThroughTheCollective("launch-unrecorded-cuda", " --device cuda");
}

// nanprov only reads: each rank's losses are the same with and without it. `training` prints one
// line with " loss " per rank and step.
void expectLossesBitIdentical(const std::string& name, const std::string& training, size_t lines) {
  auto sorted = [](const std::string& text) {
    std::multiset<std::string> found;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.find(" loss ") != std::string::npos) found.insert(line);
    }
    return found;
  };
  Result plain = sh(kGloo + training + " 2>/dev/null");
  Result probed = sh(kGloo + nanprov() + " run --out " + runDir(name).string() + " -- " + training + " 2>/dev/null");
  EXPECT_EQ(sorted(plain.out).size(), lines) << plain.out;
  EXPECT_EQ(sorted(plain.out), sorted(probed.out));
}

TEST(ProcessGroupRank, LossesAreBitIdenticalUnderSpawn) {
  expectLossesBitIdentical("launch-losses", launch("spawn", 2, " --print-losses"), 10u);
}

// Lightning starts its ranks itself: `ddp` re-runs the script with LOCAL_RANK for rank 1 (rank 0
// is the process the user started), `ddp_spawn` spawns both from a process that trains nothing.
std::string lightning(const std::string& strategy, const std::string& extra) {
  return python() + " " + std::string(NANPROV_TEST_SCRIPTS) + "/lightning_training.py --strategy " + strategy +
         " --steps 5 --glitch-step 3 --glitch-rank 1" + extra;
}

TEST(ProcessGroupRank, LightningDdp) { expectRankOneFound(runDir("lightning-ddp"), lightning("ddp", " --oracle"), 2); }

TEST(ProcessGroupRank, LightningDdpSpawn) {
  expectRankOneFound(runDir("lightning-ddp-spawn"), lightning("ddp_spawn", " --oracle"), 2);
}

TEST(ProcessGroupRank, LossesAreBitIdenticalUnderLightningDdp) {
  expectLossesBitIdentical("lightning-losses", lightning("ddp", " --print-losses"), 10u);
}

}  // namespace
