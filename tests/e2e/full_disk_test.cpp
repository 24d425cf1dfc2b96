// End-to-end: a store whose writes fail mid-run, because the file size limit (`ulimit -f`) or a
// small filesystem filled. The training is untouched (losses bit-identical); the run says when it
// happens; afterwards every reader reads what the store holds, says the disk filled (or the limit
// was hit) and from which step the store is incomplete, never that it is damaged; and the outcome
// is never plainly clean: the calls checked and those stored are both counted.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// 4 calls a step (2 layers, fwd and bwd): 1,600 calls, far more than the limits below hold.
const std::string kTraining =
    example("tiny_transformer.py") + " --d-model 16 --heads 2 --seq 8 --batch 2 --steps 400 --print-losses";

struct CutRun {
  Result plain;  // the same training without nanprov: its losses
  Result run;    // under nanprov: stdout holds the losses, stderr is in `said`
  std::string said;
};

// `limit` is shell run first ("ulimit -f 1024"), `out` the run directory.
CutRun runCut(const std::string& limit, const fs::path& out) {
  CutRun r;
  r.plain = sh(python() + " " + kTraining + " 2>&1");
  const fs::path said = out.string() + ".stderr";
  r.run = sh("bash -c '" + limit + "; " + nanprov() + " run --out " + out.string() + " -- " + python() + " " +
             kTraining + " 2>" + said.string() + "'");
  r.said = sh("cat " + said.string()).out;
  fs::remove(said);
  return r;
}

// What every reader says of a store cut short by `cause`.
void expectReadAsIncomplete(const CutRun& r, const fs::path& dir, const std::string& cause) {
  ASSERT_EQ(r.plain.code, 0) << r.plain.out;
  EXPECT_EQ(r.run.code, 0) << r.said;
  EXPECT_NE(r.plain.out.find("step399 loss 0x"), std::string::npos) << r.plain.out;
  EXPECT_EQ(r.run.out, r.plain.out) << "the training's losses are bit-identical";
  // Said while it ran, once.
  EXPECT_NE(r.said.find("rank 0: the store is incomplete from step "), std::string::npos) << r.said;
  EXPECT_NE(r.said.find(cause), std::string::npos) << r.said;

  Result report = sh(nanprov() + " report " + dir.string() + " --json");
  json doc = json::parse(report.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << report.out;
  EXPECT_EQ(report.code, 0) << report.out;
  EXPECT_EQ(doc["outcome"], "partial") << "never plainly clean: " << doc["coverage"].dump();
  EXPECT_EQ(doc["coverage"]["damage"], json::array()) << doc["coverage"].dump();
  ASSERT_EQ(doc["coverage"]["incomplete"].size(), 1u) << doc["coverage"].dump();
  const std::string incomplete = doc["coverage"]["incomplete"][0];
  EXPECT_NE(incomplete.find("rank 0: the store is incomplete from step "), std::string::npos) << incomplete;
  EXPECT_NE(incomplete.find(cause), std::string::npos) << incomplete;
  // Every call was checked: those stored and those not add up to the 1,600 the training made.
  const int64_t stored = doc["summary"]["calls"], lost = doc["coverage"]["calls_not_stored"];
  EXPECT_GT(stored, 0);
  EXPECT_GT(lost, 0);
  EXPECT_EQ(stored + lost, 1600) << doc["coverage"].dump();

  Result text = sh(nanprov() + " report " + dir.string() + " 2>&1");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("\n  rank 0: the store is incomplete from step "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("checked and not stored: writes to the store failed"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("the process ended before"), std::string::npos) << "not a kill: " << text.out;
  EXPECT_EQ(text.out.find("\nclean"), std::string::npos) << text.out;
  // Every reader answers from what the store holds (written into /tmp: the full disk is the run's).
  const fs::path elsewhere = runDir("full-disk-readers");
  fs::create_directories(elsewhere);
  for (const std::string& command : {"report " + dir.string() + " --html " + (elsewhere / "page.html").string(),
                                     "calls " + dir.string() + " --step 0",
                                     "trace " + dir.string() + " --out " + (elsewhere / "trace.json").string(),
                                     "sql " + dir.string() + " 'SELECT COUNT(*) FROM calls'"}) {
    Result read = sh(nanprov() + " " + command + " 2>&1");
    EXPECT_EQ(read.code, 0) << command << ":\n" << read.out.substr(0, 2000);
    for (const char* refusal : {"damaged", "not a readable"}) {
      EXPECT_EQ(read.out.find(refusal), std::string::npos) << command << ":\n" << read.out.substr(0, 2000);
    }
  }
  fs::remove_all(elsewhere);
}

TEST(FullDisk, AFileSizeLimitIsNamedAndTheStoreStaysReadable) {
  const fs::path dir = runDir("file-size-limit");
  // 1,024 blocks: the store's schema fits, its first few hundred calls do, 1,600 do not.
  CutRun r = runCut("ulimit -f 1024", dir);
  expectReadAsIncomplete(r, dir, "the file size limit (ulimit -f) was hit");
}

// Values go non-finite after the store was cut (a glitched batch at step 350, the store full
// from about step 100): no row shows them, but the rank's call tally kept the step. The run is
// unattributed at that step, never partial with exit 0. The truth: the first loss the plain
// training printed that is not finite.
TEST(FullDisk, ANonFiniteStepWhoseRowsWereLostIsSaid) {
  const fs::path dir = runDir("file-size-limit-nan");
  const std::string training = kTraining + " --glitch-step 350";
  Result plain = sh(python() + " " + training + " 2>&1");
  ASSERT_EQ(plain.code, 0) << plain.out;
  int64_t first_bad = -1;
  for (int64_t step = 0; step < 400 && first_bad < 0; ++step) {
    const std::string line = "step" + std::to_string(step) + " loss ";
    const size_t at = plain.out.find(line);
    ASSERT_NE(at, std::string::npos) << plain.out;
    if (plain.out.compare(at + line.size(), 2, "0x") != 0 && plain.out.compare(at + line.size(), 3, "-0x") != 0)
      first_bad = step;
  }
  ASSERT_GE(first_bad, 300) << "the glitch makes the loss non-finite after the store is cut:\n" << plain.out;

  Result run = sh("bash -c 'ulimit -f 1024; " + nanprov() + " run --out " + dir.string() + " -- " + python() + " " +
                  training + " >/dev/null 2>&1'");
  EXPECT_EQ(run.code, 1) << "the training exited 0 and its values went non-finite";
  Result report = sh(nanprov() + " report " + dir.string() + " --json");
  json doc = json::parse(report.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << report.out;
  EXPECT_EQ(report.code, 1) << report.out;
  EXPECT_EQ(doc["outcome"], "unattributed") << doc["coverage"].dump();
  EXPECT_EQ(doc["first_edge"], nullptr) << "no stored call shows it";
  EXPECT_EQ(doc["nonfinite_not_stored"], (json{{"rank", 0}, {"step", first_bad}}));
  EXPECT_EQ(doc["coverage"]["damage"], json::array()) << doc["coverage"].dump();
  Result text = sh(nanprov() + " report " + dir.string() + " 2>&1");
  EXPECT_EQ(text.code, 1) << text.out;
  EXPECT_EQ(text.out.rfind("values went non-finite at step " + std::to_string(first_bad) +
                               " on rank 0, but the calls that saw them "
                               "never reached the store",
                           0),
            0u)
      << text.out;
  EXPECT_NE(text.out.find("writes to the store failed"), std::string::npos) << text.out;
  fs::remove_all(dir);
}

// A small tmpfs at a fresh directory, `filled` bytes of it taken by a file, unmounted at the end.
// Mounting one needs root (CI runs as root); elsewhere the tests skip.
struct SmallDisk {
  fs::path at;
  bool mounted = false;
  std::string why_not;
  SmallDisk(const std::string& name, const char* size, int64_t filled) : at(runDir(name)) {
    fs::create_directories(at);
    mounted = mount("tmpfs", at.c_str(), "tmpfs", 0, size) == 0;
    if (!mounted) why_not = std::string("cannot mount a small tmpfs here (not root): ") + std::strerror(errno);
    else sh("head -c " + std::to_string(filled) + " /dev/zero > " + (at / "filler").string() + " 2>/dev/null");
  }
  ~SmallDisk() {
    if (mounted) umount(at.c_str());
    fs::remove_all(at);
  }
};

// A filesystem of 2 MiB that the store fills.
TEST(FullDisk, AFullFilesystemIsNamedAndTheStoreStaysReadable) {
  SmallDisk disk("small-disk", "size=2m", 1400000);  // about half a megabyte left around the store
  if (!disk.mounted) GTEST_SKIP() << disk.why_not;
  const fs::path dir = disk.at / "run";
  CutRun r = runCut("true", dir);
  expectReadAsIncomplete(r, dir, "the disk filled");
}

// A disk already full when the run starts: nanprov says so before the training (which runs, its
// losses bit-identical), and the report's why names the full disk, not a kill or a missing probe.
TEST(FullDisk, ADiskFullBeforeTheRunIsNamed) {
  SmallDisk disk("full-disk", "size=1m", 2000000);  // more than it holds: full
  if (!disk.mounted) GTEST_SKIP() << disk.why_not;
  const fs::path dir = disk.at / "run";
  const std::string training = example("tiny_transformer.py") + " --steps 3 --print-losses";
  Result plain = sh(python() + " " + training + " 2>/dev/null");
  const fs::path said = runDir("full-disk-said");
  Result run =
      sh(nanprov() + " run --out " + dir.string() + " -- " + python() + " " + training + " 2>" + said.string());
  const std::string stderr_text = sh("cat " + said.string()).out;
  fs::remove(said);
  EXPECT_EQ(run.out, plain.out) << "the training's losses are bit-identical";
  EXPECT_NE(stderr_text.find("nanprov: cannot write " + (dir / "run.json").string() +
                             ": No space left on device: the training runs"),
            std::string::npos)
      << stderr_text;
  Result report = sh(nanprov() + " report " + dir.string() + " 2>&1");
  EXPECT_EQ(report.code, 4) << report.out;
  EXPECT_NE(report.out.find(
                "why: rank 0 could not write its store, so none of its calls was recorded (its store could not be "
                "written; the disk holding " +
                dir.string() + " is full now)"),
            std::string::npos)
      << report.out;
}

}  // namespace
