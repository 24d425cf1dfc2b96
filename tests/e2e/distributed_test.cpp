// Distributed training as people run it, on the CPU over gloo: FSDP2 (fully_shard) under torchrun
// with a real overflow on rank 1 only, a worker that cannot write its store, and a two-node job
// (two torchrun launches on localhost, each under its own `nanprov run`) read as one job.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string torchrun() { return (fs::path(python()).parent_path() / "torchrun").string(); }

// Loopback only: CI sandboxes have no other interface gloo could use. The glitch (a batch scaled
// by 1e20) reaches rank 1 only, at step 2: its first attention's fp32 logits overflow.
const std::string kGloo = "GLOO_SOCKET_IFNAME=lo ";
const std::string kOverflowOnRankOne = " --steps 4 --fsdp2 --glitch-step 2 --glitch-rank 1";

// `nanprov run --out DIR -- torchrun --standalone --nproc-per-node=N tiny_transformer.py ARGS`.
Result trainUnderTorchrun(const fs::path& dir, int ranks, const std::string& args) {
  return sh(kGloo + nanprov() + " run --out " + dir.string() + " -- " + torchrun() + " --standalone --nproc-per-node=" +
            std::to_string(ranks) + " " + example("tiny_transformer.py") + " " + args + " 2>&1");
}

bool contains(const json& list, const std::string& item) {
  return std::find(list.begin(), list.end(), json(item)) != list.end();
}

// FSDP2 over `ranks` ranks: rank 1's overflow is the first edge, the gradient sentinel names the
// sharded parameters by their fully qualified names, and the launcher claims no store.
void expectFsdp2FindsRankOne(int ranks) {
  fs::path dir = runDir("fsdp2-" + std::to_string(ranks));
  Result t = trainUnderTorchrun(dir, ranks, kOverflowOnRankOne);
  ASSERT_EQ(t.code, 1) << "the training exits 0; nanprov found the edge: " << t.out;
  expectEveryRankRecorded(t.out);
  json doc = reportOfEveryRank(dir, ranks);
  const json& e = doc["first_edge"];
  expectFields(e, {{"rank", 1},
                   {"step", 2},
                   {"phase", "fwd"},
                   {"layer", 0},
                   {"module", "layers.0.attn"},
                   {"origin", "attention"},
                   {"inputs_finite", true}});
  // FSDP2's one-dimensional mesh: each rank's place in it is kept, and the edge says its own.
  for (const json& r : doc["ranks"]) {
    EXPECT_EQ(r["meta"]["mesh"], "dim0=" + std::to_string(r["rank"].get<int>())) << r.dump();
  }
  EXPECT_NE(t.out.find("module layers.0.attn, mesh dim0=1"), std::string::npos) << t.out;
  // Every gradient went NaN after the reduce-scatter; each rank checked its own shards.
  const json& s = doc["gradient_sentinel"];
  ASSERT_TRUE(s.is_object()) << doc.dump();
  EXPECT_EQ(s["step"], 2);
  for (const char* name : {"embed.weight", "layers.0.attn.q_proj.weight", "layers.1.mlp.2.bias", "head.weight"}) {
    EXPECT_TRUE(contains(s["gradients"], name)) << name << " in " << s.dump();
  }
  for (const json& name : s["parameters"])
    EXPECT_EQ(name.get<std::string>().rfind("param", 0), std::string::npos) << s.dump();
  // Under FSDP2 attention keeps its module paths and layers on every rank.
  Result q = sh(nanprov() + " sql " + dir.string() +
                " \"SELECT DISTINCT layer, module FROM calls WHERE phase='fwd' ORDER BY layer\" --json");
  json rows = json::parse(q.out, nullptr, false);
  ASSERT_EQ(rows.size(), 2u) << q.out;
  EXPECT_EQ(rows[0]["module"], "layers.0.attn");
  EXPECT_EQ(rows[1]["module"], "layers.1.attn");
  EXPECT_EQ(rows[1]["layer"], 1);
}

TEST(Distributed, Fsdp2TwoRanksOverflowOnRankOne) { expectFsdp2FindsRankOne(2); }

// Lightning's launcher runs rank 0 in the script's own process and sets its WORLD_SIZE only after
// torch was imported: rank 0 still records the world it trains in (it said 1 of 2's world was 1).
TEST(Distributed, RankZeroOfALauncherThatSetsTheWorldLateRecordsIt) {
  TrainedRun r = train("late-world", "", "", std::string(NANPROV_TEST_SCRIPTS) + "/late_world_size.py");
  ASSERT_EQ(r.train.code, 0) << r.train.out;
  ASSERT_EQ(r.doc["ranks"].size(), 2u) << r.report.out;
  for (const json& rank : r.doc["ranks"]) EXPECT_EQ(rank["meta"]["world_size"], "2") << rank.dump();
  EXPECT_EQ(r.doc["missing_ranks"], json::array()) << r.report.out;
}

// DDP holds the model as its `module`: names are shown as the user wrote the model, without the
// wrapper's `module.` in front, for attention calls and for the gradient sentinel's parameters.
TEST(Distributed, DdpNamesModulesAndParametersWithoutTheWrapper) {
  fs::path dir = runDir("ddp-names");
  Result t = trainUnderTorchrun(dir, 2, "--steps 4 --ddp --glitch-step 2 --glitch-rank 1");
  ASSERT_EQ(t.code, 1) << t.out;
  json doc = commandJson("report", dir);
  expectFields(doc["first_edge"], {{"rank", 1}, {"step", 2}, {"module", "layers.0.attn"}});
  json rows = json::parse(sh(nanprov() + " sql " + dir.string() + " \"SELECT DISTINCT module FROM calls\" --json").out,
                          nullptr, false);
  ASSERT_FALSE(rows.empty()) << rows.dump();
  for (const json& row : rows)
    EXPECT_EQ(row["module"].get<std::string>().rfind("module.", 0), std::string::npos) << rows.dump();
  const json& s = doc["gradient_sentinel"];
  ASSERT_TRUE(s.is_object()) << doc.dump(1);
  EXPECT_TRUE(contains(s["gradients"], "layers.0.attn.q_proj.weight")) << s.dump();
  for (const json& name : s["gradients"])
    EXPECT_EQ(name.get<std::string>().rfind("module.", 0), std::string::npos) << s.dump();
}

// The NaN's path between ranks: rank 1's attention overflows at step 3, and rank 0's gradients go
// non-finite only through DDP's all-reduce of the bucket. Ground truth from the training itself:
// a comm hook that checks each bucket in plain PyTorch before and after its all-reduce.
TEST(Distributed, DdpReportNamesTheAllReduceThatCarriedTheNanToTheOtherRank) {
  fs::path dir = runDir("ddp-collective-path");
  Result t = trainUnderTorchrun(dir, 2, "--steps 5 --ddp --bucket-health --glitch-step 3 --glitch-rank 1");
  ASSERT_EQ(t.code, 1) << t.out;
  // The hook's own account: at step 3 rank 1 sent a non-finite bucket, rank 0's was finite, and
  // both came back non-finite.
  EXPECT_NE(t.out.find("bucket rank1 step3 index0 input nonfinite output nonfinite"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("bucket rank0 step3 index0 input finite output nonfinite"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("bucket rank0 step2 index0 input finite output finite"), std::string::npos) << t.out;

  json doc = commandJson("report", dir);
  expectFields(
      doc["first_edge"],
      {{"rank", 1}, {"step", 3}, {"phase", "fwd"}, {"layer", 0}, {"module", "layers.0.attn"}, {"origin", "attention"}});
  const json& paths = doc["collective_paths"];
  ASSERT_EQ(paths.size(), 1u) << doc.dump(1);
  expectFields(paths[0], {{"rank", 0}, {"step", 3}, {"op", "c10d::allreduce_"}, {"made_by_collective", false}});
  EXPECT_EQ(paths[0]["from_ranks"], json::array({1})) << paths.dump();
  EXPECT_TRUE(contains(paths[0]["parameters"], "layers.0.attn.q_proj.weight")) << paths.dump();
  // The sentinel names the rank that made the gradients, not the one that received them.
  EXPECT_EQ(doc["gradient_sentinel"]["rank"], 1) << doc["gradient_sentinel"].dump();

  Result text = sh(nanprov() + " report " + dir.string());
  EXPECT_NE(text.out.find("rank 0: gradients went non-finite at step 3 in c10d::allreduce_"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("its input was finite here and non-finite on rank 1"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("outside attention"), std::string::npos) << text.out;
  // Only collectives that carried a non-finite value are stored; every checked one is counted.
  json rows = json::parse(sh(nanprov() + " sql " + dir.string() +
                             " \"SELECT rank, value FROM meta WHERE key = 'collectives_checked' ORDER BY rank\" --json")
                              .out,
                          nullptr, false);
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  for (const json& row : rows) EXPECT_GE(std::stoi(row["value"].get<std::string>()), 5) << rows.dump();
}

// Checking DDP's collectives reads them only: the losses are bit-identical with and without nanprov.
TEST(Distributed, DdpLossesAreBitIdenticalWithAndWithoutNanprov) {
  const std::string training = torchrun() + " --standalone --nproc-per-node=2 " + example("tiny_transformer.py") +
                               " --steps 5 --ddp --glitch-step 3 --glitch-rank 1 --print-losses 2>/dev/null | "
                               "grep '^rank.* loss ' | sort";
  Result plain = sh(kGloo + training);
  Result probed = sh(kGloo + nanprov() + " run --out " + runDir("ddp-losses").string() + " -- " + training);
  ASSERT_EQ(std::count(plain.out.begin(), plain.out.end(), '\n'), 10) << plain.out;
  EXPECT_EQ(plain.out, probed.out);
}

TEST(Distributed, Fsdp2FourRanksOverflowOnRankOne) { expectFsdp2FindsRankOne(4); }

// `python -m torch.distributed.run` imports torch before its argv names the module: the launcher
// is still told from its workers, loads no probes, and both workers record.
TEST(Distributed, ModuleLaunchedTorchrunRecordsOnlyItsWorkers) {
  fs::path dir = runDir("python-m-torchrun");
  Result t = sh(kGloo + nanprov() + " run --out " + dir.string() + " -- " + python() +
                " -m torch.distributed.run --standalone --nproc-per-node=2 " + example("tiny_transformer.py") +
                " --steps 2 --ddp 2>&1");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_EQ(t.out.find("NOT RECORDED"), std::string::npos) << t.out;
  json doc = commandJson("report", dir);
  EXPECT_EQ(doc["outcome"], "clean") << doc.dump(1);
  EXPECT_EQ(doc["summary"]["ranks"], 2);
  int launchers = 0;
  for (const auto& note : fs::directory_iterator(dir / "processes")) {
    std::ifstream in(note.path());
    launchers += json::parse(in, nullptr, false).value("status", "") == "launcher";
  }
  EXPECT_EQ(launchers, 1);
}

// The sentinel reads the local shards only: FSDP2's losses are bit-identical with and without nanprov.
TEST(Distributed, Fsdp2LossesAreBitIdenticalWithAndWithoutNanprov) {
  const std::string training = torchrun() + " --standalone --nproc-per-node=2 " + example("tiny_transformer.py") +
                               " --steps 3 --fsdp2 --print-losses 2>/dev/null | grep '^rank.* loss ' | sort";
  Result plain = sh(kGloo + training);
  Result probed = sh(kGloo + nanprov() + " run --out " + runDir("fsdp2-losses").string() + " -- " + training);
  ASSERT_EQ(std::count(plain.out.begin(), plain.out.end(), '\n'), 6) << plain.out;
  EXPECT_EQ(plain.out, probed.out);
}

// A stray process took rank 1's store name before its worker made its store: the worker says so
// loudly, trains on, and the report names the rank that was not recorded (and is no longer clean).
TEST(Distributed, WorkerThatCannotWriteItsStoreIsNamedInTheReport) {
  fs::path dir = runDir("unrecorded");
  Result t = sh(kGloo + nanprov() + " run --out " + dir.string() + " -- " + torchrun() +
                " --standalone --nproc-per-node=2 " + std::string(NANPROV_TEST_SCRIPTS) + "/taken_rank_store.py 1 " +
                example("tiny_transformer.py") + " --steps 2 --fsdp2 2>&1");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("RANK 1 IS NOT RECORDED"), std::string::npos) << t.out;
  Result rep = sh(nanprov() + " report " + dir.string() + " --json");
  ASSERT_EQ(rep.code, 0) << rep.out;
  json doc = json::parse(rep.out);
  EXPECT_EQ(doc["outcome"], "partial");
  EXPECT_EQ(doc["summary"]["ranks"], 1);
  EXPECT_EQ(doc["missing_ranks"], json::array({1}));
  ASSERT_EQ(doc["unrecorded_ranks"].size(), 1u) << rep.out;
  EXPECT_EQ(doc["unrecorded_ranks"][0]["rank"], 1);
  EXPECT_NE(doc["unrecorded_ranks"][0]["why"].get<std::string>().find("already exists"), std::string::npos);
  Result text = sh(nanprov() + " report " + dir.string());
  EXPECT_NE(text.out.find("NOT RECORDED: rank 1"), std::string::npos) << text.out;
}

// Two nodes on localhost, one rank each, each under its own `nanprov run`: each directory alone
// is unattributed (rank 1 made the NaN rank 0 received, and the other is not read); together they are one job whose
// first edge is rank 1's; another job's directory is refused in one line.
TEST(Distributed, TwoNodesReadAsOneJob) {
  const int port = freePort();
  ASSERT_GT(port, 0);
  fs::path node[2] = {runDir("node0"), runDir("node1")};
  const std::string job = "nanprov-e2e-" + std::to_string(getpid());
  std::string both;
  for (int n = 0; n < 2; ++n) {
    both += "(" + kGloo + nanprov() + " run --out " + node[n].string() + " -- " + torchrun() +
            " --nnodes=2 --node-rank=" + std::to_string(n) + " --nproc-per-node=1 --rdzv-id=" + job +
            " --rdzv-endpoint=localhost:" + std::to_string(port) + " " + example("tiny_transformer.py") +
            kOverflowOnRankOne + " > " + node[n].string() + ".log 2>&1; echo $? > " + node[n].string() + ".code) & ";
  }
  Result launched = sh(both + "wait");
  ASSERT_EQ(launched.code, 0);
  for (const fs::path& n : node) {
    std::ifstream log(n.string() + ".log");
    std::string out((std::istreambuf_iterator<char>(log)), {});
    EXPECT_TRUE(fs::exists(n / "run.json")) << out;
    EXPECT_EQ(out.find("already exists"), std::string::npos) << out;
  }
  EXPECT_TRUE(fs::exists(node[0] / "rank-0.sqlite"));
  EXPECT_TRUE(fs::exists(node[1] / "rank-1.sqlite"));

  Result alone = sh(nanprov() + " report " + node[0].string() + " --json");
  json one = json::parse(alone.out, nullptr, false);
  EXPECT_EQ(one["outcome"], "unattributed") << alone.out;
  EXPECT_EQ(one["missing_ranks"], json::array({1}));

  Result rep = sh(nanprov() + " report " + node[0].string() + " " + node[1].string() + " --json");
  ASSERT_EQ(rep.code, 1) << rep.out;
  json doc = json::parse(rep.out);
  EXPECT_EQ(doc["summary"]["ranks"], 2);
  EXPECT_EQ(doc["missing_ranks"], json::array());
  EXPECT_EQ(doc["clocks_differ"], true);
  EXPECT_EQ(doc["run_dirs"].size(), 2u);
  expectFields(doc["first_edge"], {{"rank", 1}, {"step", 2}, {"phase", "fwd"}, {"module", "layers.0.attn"}});
  // The capture lies in rank 1's own directory.
  EXPECT_EQ(doc["first_edge"]["capture"].get<std::string>().rfind(node[1].string(), 0), 0u) << doc["first_edge"].dump();
  Result text = sh(nanprov() + " report " + node[0].string() + " " + node[1].string());
  EXPECT_NE(text.out.find("clocks differ between hosts"), std::string::npos) << text.out;
  // The other readers take the two directories too.
  Result calls = sh(nanprov() + " calls " + node[0].string() + " " + node[1].string() + " --rank 1 --nonfinite --json");
  json listed = json::parse(calls.out, nullptr, false);
  ASSERT_TRUE(listed.is_array() && !listed.empty()) << calls.out;
  EXPECT_EQ(listed[0]["name"], doc["first_edge"]["name"]);
  Result sql = sh(nanprov() + " sql " + node[0].string() + " " + node[1].string() +
                  " \"SELECT COUNT(DISTINCT rank) AS ranks FROM calls\" --json");
  EXPECT_EQ(json::parse(sql.out, nullptr, false)[0]["ranks"], 2) << sql.out;

  // Another job (a single-process run): refused in one line, with its own exit code.
  TrainedRun other = train("not-this-job", "", "--steps 1");
  ASSERT_EQ(other.report.code, 0) << other.train.out;
  Result refused = sh(nanprov() + " report " + node[0].string() + " " + other.dir.string() + " 2>&1");
  EXPECT_EQ(refused.code, 6) << refused.out;
  EXPECT_EQ(std::count(refused.out.begin(), refused.out.end(), '\n'), 1) << refused.out;
  EXPECT_NE(refused.out.find("another job"), std::string::npos) << refused.out;
  Result refused_calls = sh(nanprov() + " calls " + node[1].string() + " " + other.dir.string() + " 2>&1");
  EXPECT_EQ(refused_calls.code, 6) << refused_calls.out;
}

}  // namespace
