// Slurm jobs, both ways people wrap them, on the CPU over gloo: `srun nanprov run --out DIR -- python
// train.py` (one `nanprov run` per task, all into one directory, or each node into its own) and
// `nanprov run -- srun python train.py` (the probes reach every task through srun's environment).
// srun is not here: each task is started with the environment srun gives a task, and a stand-in
// srun starts the tasks of the second way. The glitch (a batch scaled by 1e20) reaches rank 1 only,
// at step 2: its first attention's fp32 logits overflow.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kGloo = "GLOO_SOCKET_IFNAME=lo ";
const std::string kOverflowOnRankOne = " --steps 4 --ddp --glitch-step 2 --glitch-rank 1";
const std::string kJob = "4242";

std::string taskTraining() {
  return python() + " " + std::string(NANPROV_TEST_SCRIPTS) + "/slurm_task_training.py " +
         example("tiny_transformer.py");
}

// The environment srun gives task `task` of `tasks` (job kJob, step 0) on node `node` of `nodes`.
std::string taskEnv(int task, int tasks, int node = 0, int nodes = 1, const std::string& job = kJob) {
  return "SLURM_JOB_ID=" + job + " SLURM_STEP_ID=0 SLURM_PROCID=" + std::to_string(task) +
         " SLURM_LOCALID=" + std::to_string(nodes == 1 ? task : 0) + " SLURM_NTASKS=" + std::to_string(tasks) +
         " SLURM_NODEID=" + std::to_string(node) + " SLURM_NNODES=" + std::to_string(nodes) + " ";
}

std::string slurped(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), {}};
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `srun nanprov run --out DIR[task] -- python train.py` with `tasks` tasks over `nodes` nodes:
// every task's `nanprov run` started at once; each one's output and exit code beside its directory.
struct Launched {
  std::vector<std::string> out;
  std::vector<int> code;
};
Launched srunNanprovRun(const std::vector<fs::path>& dir_of_task, int nodes, const std::string& args) {
  const int tasks = static_cast<int>(dir_of_task.size());
  const std::string rendezvous = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(freePort()) + " ";
  std::string all;
  for (int t = 0; t < tasks; ++t) {
    const std::string log = dir_of_task[t].string() + ".task-" + std::to_string(t);
    all += "(" + kGloo + rendezvous + taskEnv(t, tasks, t * nodes / tasks, nodes) + nanprov() + " run --out " +
           dir_of_task[t].string() + " -- " + taskTraining() + args + " > " + log + ".log 2>&1; echo $? > " + log +
           ".code) & ";
  }
  sh(all + "wait");
  Launched l;
  for (int t = 0; t < tasks; ++t) {
    const std::string log = dir_of_task[t].string() + ".task-" + std::to_string(t);
    l.out.push_back(slurped(log + ".log"));
    l.code.push_back(std::stoi("0" + slurped(log + ".code")));
  }
  return l;
}

// The report of a whole job names rank 1's overflow at step 2, with every rank of the world read.
void expectRankOnesEdge(const json& doc, int ranks) {
  EXPECT_EQ(doc["summary"]["ranks"], ranks) << doc.dump(1);
  EXPECT_EQ(doc["world_size"], ranks);
  EXPECT_EQ(doc["missing_ranks"], json::array());
  EXPECT_EQ(doc["job"], "slurm:" + kJob + ".0");
  expectFields(
      doc["first_edge"],
      {{"rank", 1}, {"step", 2}, {"phase", "fwd"}, {"layer", 0}, {"module", "layers.0.attn"}, {"origin", "attention"}});
}

// `srun -n TASKS nanprov run --out DIR`: every task joins DIR with its own run file, the stores are
// each rank's own, each task exits as the job's finding says, and one report is printed, not TASKS.
void expectTasksShareOneDirectory(int tasks) {
  const fs::path root = runDir("srun-" + std::to_string(tasks) + "-tasks"), dir = root / "job";
  fs::create_directories(root);
  Launched l = srunNanprovRun(std::vector<fs::path>(tasks, dir), 1, kOverflowOnRankOne);
  std::string all;
  for (int t = 0; t < tasks; ++t) {
    EXPECT_EQ(l.code[t], 1) << "the training exits 0; nanprov found the edge: " << l.out[t];
    EXPECT_EQ(l.out[t].find("already"), std::string::npos) << l.out[t];
    EXPECT_EQ(l.out[t].find("NOT RECORDED"), std::string::npos) << l.out[t];
    EXPECT_TRUE(fs::exists(dir / ("run.task-" + std::to_string(t) + ".json")));
    EXPECT_TRUE(fs::exists(dir / ("rank-" + std::to_string(t) + ".sqlite")));
    all += l.out[t];
  }
  EXPECT_FALSE(fs::exists(dir / "run.json"));
  EXPECT_EQ(count(all, "  details: nanprov report"), static_cast<size_t>(tasks)) << all;
  EXPECT_EQ(count(all, "prints the report of"), static_cast<size_t>(tasks - 1)) << all;
  EXPECT_GE(count(all, "first non-finite edge"), static_cast<size_t>(tasks))
      << all;  // the headline, in every task's words
  Result rep = sh(nanprov() + " report " + dir.string() + " --json");
  ASSERT_EQ(rep.code, 1) << rep.out;
  expectRankOnesEdge(json::parse(rep.out), tasks);
  json runs = json::parse(sh(nanprov() + " runs --root " + root.string() + " --json").out, nullptr, false);
  ASSERT_EQ(runs.size(), 1u) << runs.dump();
  EXPECT_EQ(runs[0]["exit_code"], 0);  // every task's training ended well
  EXPECT_EQ(runs[0]["job"], "slurm:" + kJob + ".0");
}

TEST(Slurm, TwoTasksOfOneStepShareOneRunDirectory) { expectTasksShareOneDirectory(2); }
TEST(Slurm, FourTasksOfOneStepShareOneRunDirectory) { expectTasksShareOneDirectory(4); }

// `srun -N2 nanprov run --out /local/DIR`: each node's directory alone is unattributed and says where
// the other tasks are; together they are one job, whose id is the Slurm job's; another Slurm job's
// directory is refused in one line.
TEST(Slurm, TwoNodesEachWithItsOwnDirectoryReadAsOneJob) {
  const std::vector<fs::path> node = {runDir("slurm-node0"), runDir("slurm-node1")};
  Launched l = srunNanprovRun(node, 2, kOverflowOnRankOne);
  for (int t = 0; t < 2; ++t) {
    EXPECT_NE(l.out[t].find("the others recorded into their nodes' directories"), std::string::npos) << l.out[t];
    EXPECT_EQ(l.out[t].find("prints the report of"), std::string::npos) << l.out[t];
  }
  json alone = commandJson("report", node[0]);
  // Rank 1 made the NaN that reached rank 0, and its store is not read here: unattributed.
  EXPECT_EQ(alone["outcome"], "unattributed") << alone.dump(1);
  EXPECT_EQ(alone["missing_ranks"], json::array({1}));
  Result rep = sh(nanprov() + " report " + node[0].string() + " " + node[1].string() + " --json");
  ASSERT_EQ(rep.code, 1) << rep.out;
  expectRankOnesEdge(json::parse(rep.out), 2);

  // The same script, an hour later, as Slurm job 4243: its directory is not this job's.
  const fs::path other = runDir("slurm-other-job");
  Result later =
      sh(kGloo + taskEnv(0, 1, 0, 1, "4243") + "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(freePort()) + " " +
         nanprov() + " run --out " + other.string() + " -- " + taskTraining() + " --steps 1 --ddp 2>&1");
  ASSERT_EQ(later.code, 0) << later.out;
  Result refused = sh(nanprov() + " report " + node[0].string() + " " + other.string() + " 2>&1");
  EXPECT_EQ(refused.code, 6) << refused.out;
  EXPECT_EQ(std::count(refused.out.begin(), refused.out.end(), '\n'), 1) << refused.out;
  EXPECT_NE(refused.out.find("(Slurm job 4243.0, not " + kJob + ".0)"), std::string::npos) << refused.out;
}

// `nanprov run -- srun python train.py`: one `nanprov run`, one run.json; srun passes the probes'
// environment to every task, and each task records its rank under the Slurm job's id.
TEST(Slurm, NanprovRunWrappingSrunReachesEveryTask) {
  const fs::path dir = runDir("wraps-srun");
  const fs::path bin = runDir("fake-srun-bin");
  // srun as a task sees it: the command once per task, each with its task environment; srun's own
  // environment (and so nanprov's) passes on, as srun's default --export=ALL does.
  fakeExecutable(bin, "srun",
                 "#!/bin/sh\n"
                 "pids=''\n"
                 "for t in 0 1; do\n"
                 "  SLURM_JOB_ID=" +
                     kJob +
                     " SLURM_STEP_ID=0 SLURM_PROCID=$t SLURM_LOCALID=$t SLURM_NTASKS=2 SLURM_NODEID=0 "
                     "SLURM_NNODES=1 \"$@\" & pids=\"$pids $!\"\n"
                     "done\n"
                     "rc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc\n");
  Result t =
      sh(kGloo + "PATH=" + bin.string() + ":$PATH MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(freePort()) +
         " " + nanprov() + " run --out " + dir.string() + " -- srun " + taskTraining() + kOverflowOnRankOne + " 2>&1");
  EXPECT_EQ(t.code, 1) << t.out;
  EXPECT_EQ(t.out.find("NOT RECORDED"), std::string::npos) << t.out;
  EXPECT_TRUE(fs::exists(dir / "run.json"));
  Result rep = sh(nanprov() + " report " + dir.string() + " --json");
  ASSERT_EQ(rep.code, 1) << rep.out;
  expectRankOnesEdge(json::parse(rep.out), 2);
}

// What must not be joined, each refused in one line before anything trains: another Slurm job's
// tasks, a task that recorded here already, a run that is not a Slurm job's.
TEST(Slurm, ADirectoryOfAnotherRunIsRefusedInOneLine) {
  const fs::path dir = runDir("slurm-taken");
  fs::create_directories(dir);
  std::ofstream(dir / "run.task-0.json") << R"({"command": ["python"], "slurm": {"job": "4000.0", "task": 0}})";
  const std::string run = nanprov() + " run --out " + dir.string() + " -- " + python() + " -c pass 2>&1";
  Result other_job = sh(taskEnv(1, 2) + run);
  EXPECT_EQ(other_job.code, 2) << other_job.out;
  EXPECT_EQ(std::count(other_job.out.begin(), other_job.out.end(), '\n'), 1) << other_job.out;
  EXPECT_NE(other_job.out.find("holds Slurm job 4000.0's run, not job " + kJob + ".0's"), std::string::npos)
      << other_job.out;
  Result twice = sh(taskEnv(0, 2, 0, 1, "4000") + run);
  EXPECT_EQ(twice.code, 2) << twice.out;
  EXPECT_NE(twice.out.find("task 0 of Slurm job 4000.0 already recorded into"), std::string::npos) << twice.out;
  Result plain = sh(run);
  EXPECT_EQ(plain.code, 2) << plain.out;
  EXPECT_NE(plain.out.find("already holds a run"), std::string::npos) << plain.out;

  const fs::path single = runDir("slurm-single-run");
  fs::create_directories(single);
  std::ofstream(single / "run.json") << R"({"command": ["python"]})";
  Result task = sh(taskEnv(0, 2) + nanprov() + " run --out " + single.string() + " -- " + python() + " -c pass 2>&1");
  EXPECT_EQ(task.code, 2) << task.out;
  EXPECT_NE(task.out.find("already holds a run"), std::string::npos) << task.out;
}

}  // namespace
