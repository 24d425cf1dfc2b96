// End-to-end: damaged, hostile and racing inputs. One real CPU training run is recorded once;
// each test damages a copy of it and runs the reading commands on that, asserting the answer is
// one line and an exit code, never an abort, a hang or a silent merge.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// The commands that read a run. Each must answer any damaged run in one line.
const std::vector<std::string> kReaders = {"report", "report --json", "calls", "calls --json", "kernels",
                                           "kernels --json", "replay", "sql \"SELECT COUNT(*) FROM calls\""};

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

// `nanprov <reader> DIR`, with stdout dropped and stderr kept.
Result read(const std::string& reader, const fs::path& dir) {
  size_t space = reader.find(' ');
  std::string command = reader.substr(0, space);
  std::string rest = space == std::string::npos ? "" : reader.substr(space);
  return sh("timeout 30 " + nanprov() + " " + command + " " + dir.string() + rest + " 2>&1 >/dev/null");
}

// A real run with a source edge and its capture, recorded once for the suite.
class Hardening : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    recorded_ = new TrainedRun(train("hardening", "", "--steps 3 --glitch-step 1"));
  }
  static void TearDownTestSuite() { delete recorded_; }

  // A fresh copy of the recorded run, to damage.
  fs::path copy(const std::string& name) {
    fs::path dir = runDir("hardening-" + name);
    fs::copy(recorded_->dir, dir, fs::copy_options::recursive);
    return dir;
  }

  static void sqlite(const fs::path& store, const std::string& statement) {
    Result r = sh(python() + " -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); "
                  "c.commit()\" '" + store.string() + "' \"" + statement + "\" 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
  }

  static TrainedRun* recorded_;
};
TrainedRun* Hardening::recorded_ = nullptr;

TEST_F(Hardening, TheRecordedRunHasAnEdge) {
  ASSERT_EQ(recorded_->report.code, 1) << recorded_->train.out;
  for (const std::string& reader : kReaders) {
    Result r = read(reader, recorded_->dir);
    EXPECT_TRUE(r.code == 0 || r.code == 1) << reader << ": " << r.out;
  }
}

TEST_F(Hardening, MetaRankThatIsNotANumberIsOneLine) {
  for (std::string value : {"abc", "99999999999", "-1"}) {
    SCOPED_TRACE(value);
    fs::path dir = copy("rank-" + value);
    sqlite(dir / "rank-0.sqlite", "UPDATE meta SET value='" + value + "' WHERE key='rank'");
    for (const std::string& reader : kReaders) {
      Result r = read(reader, dir);
      EXPECT_EQ(r.code, 3) << reader << ": " << r.out;
      EXPECT_EQ(lines(r.out), 1) << reader << ": " << r.out;
      EXPECT_NE(r.out.find("meta.rank is not a rank number"), std::string::npos) << reader << ": " << r.out;
    }
  }
}

TEST_F(Hardening, FilesNamedLikeStoresThatAreNotStoresAreIgnored) {
  fs::path dir = copy("odd-names");
  std::ofstream(dir / "rank-99999999999.sqlite") << "not a store";
  ASSERT_EQ(mkfifo((dir / "rank-1.sqlite").c_str(), 0644), 0);  // would block open() forever
  fs::create_directory(dir / "rank-2.sqlite");
  for (const std::string& reader : kReaders) {
    Result r = read(reader, dir);
    EXPECT_TRUE(r.code == 0 || r.code == 1) << reader << ": " << r.out;
  }
  Result again = sh("timeout 30 " + nanprov() + " run --out " + dir.string() + " -- " + python() + " -c pass 2>&1");
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find("already holds a run"), std::string::npos) << again.out;
}

TEST_F(Hardening, InvalidUtf8InTextColumnsStillGivesValidJson) {
  fs::path dir = copy("utf8");
  sqlite(dir / "rank-0.sqlite", "UPDATE signatures SET module=CAST(x'fffe41' AS TEXT), op=CAST(x'c3' AS TEXT)");
  for (std::string command : {"calls", "kernels", "report", "sql \"SELECT module FROM calls\""}) {
    SCOPED_TRACE(command);
    size_t space = command.find(' ');
    std::string rest = space == std::string::npos ? "" : command.substr(space);
    Result r = sh(nanprov() + " " + command.substr(0, space) + " " + dir.string() + rest + " --json");
    EXPECT_TRUE(r.code == 0 || r.code == 1) << r.out;
    EXPECT_FALSE(json::parse(r.out, nullptr, false).is_discarded()) << r.out;
  }
  json calls = commandJson("calls", dir);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls[0]["module"], "\xef\xbf\xbd\xef\xbf\xbd" "A") << "each invalid byte became U+FFFD";
}

// 1,200 bytes of 'ü' in a module path, cut by the probes at 1,023: with every call captured, the
// path reaches the store, the capture header and the JSON of every command, whole characters only.
TEST(HardeningTraining, ALongNonAsciiModulePathIsCutOnACharacter) {
  fs::path dir = runDir("long-path");
  Result run = sh(nanprov() + " run --out " + dir.string() + " --capture-every 1 -- " + python() + " " +
                  std::string(NANPROV_TEST_SCRIPTS) + "/long_module_path.py 2>&1");
  ASSERT_EQ(run.code, 0) << run.out;
  json calls = commandJson("calls", dir);
  ASSERT_EQ(calls.size(), 4u) << run.out;
  std::string module = calls[0]["module"];
  EXPECT_EQ(module.rfind("blocks.\xc3\xbc", 0), 0u) << module.substr(0, 20);
  EXPECT_EQ(module.size(), 7u + 2 * 508) << "cut below 1,024 bytes, at a character boundary";
  EXPECT_EQ(module.find("\xef\xbf\xbd"), std::string::npos) << "no replacement character: nothing was split";
  Result replay = sh(nanprov() + " replay " + (dir / "captures" / "rank0-layer0-call0-fwd-seq0.safetensors").string() +
                     " --json");
  EXPECT_EQ(replay.code, 0) << replay.out;
}

// Two runs into one --out: the second is refused at once, even while the first has not yet
// written a store, and the first run's answer is intact.
TEST(HardeningTraining, ASecondRunIntoTheSameDirectoryIsRefused) {
  fs::path dir = runDir("same-out");
  std::string first = nanprov() + " run --out " + dir.string() + " -- " + python() + " " +
                      example("tiny_transformer.py") + " --steps 4 --glitch-step 1 >/dev/null 2>&1";
  std::string second = nanprov() + " run --out " + dir.string() + " -- " + python() + " " +
                       example("tiny_transformer.py") + " --steps 2 2>&1";
  // The second starts the moment the first has claimed the directory, long before its training
  // has imported torch and created a store.
  std::string claimed = "while [ ! -e " + (dir / "run.json").string() + " ]; do sleep 0.005; done; ";
  Result both = sh("(" + first + ") & " + claimed + second + "; echo \"second exit $?\"; wait");
  EXPECT_NE(both.out.find("already holds a run"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("second exit 2"), std::string::npos) << both.out;
  json report = json::parse(sh(nanprov() + " report " + dir.string() + " --json").out, nullptr, false);
  EXPECT_EQ(report["outcome"], "edge") << report.dump();
  json run = json::parse(std::ifstream(dir / "run.json"), nullptr, false);
  EXPECT_NE(run["command"].dump().find("--glitch-step"), std::string::npos) << "run.json is the first run's";
}

// Reports polled from the first moment of a run read as "starting" or as what it has so far:
// a store is created whole, under another name, then linked into place.
TEST(HardeningTraining, ReportsDuringAStartingRunNeverSayDamaged) {
  fs::path dir = runDir("polled");
  std::string run = nanprov() + " run --out " + dir.string() + " -- " + python() + " " +
                    example("tiny_transformer.py") + " --steps 3 >/dev/null 2>&1";
  std::string poll = "for i in $(seq 400); do " + nanprov() + " report " + dir.string() +
                     " 2>&1 >/dev/null | grep -i 'damaged'; sleep 0.01; done";
  Result r = sh("(" + run + ") & " + poll + "; wait");
  EXPECT_EQ(r.out, "") << "a report said the store was damaged while the run started";
}

// A newer run whose command failed before recording anything does not hide the run that found
// something: reading commands default to the newest run with data, and `runs` lists both.
TEST(HardeningTraining, TheNewestRunWithDataIsTheDefaultAndRunsListsThemAll) {
  fs::path cwd = runDir("runs-root");
  fs::create_directories(cwd);
  std::string in = "cd " + cwd.string() + " && ";
  Result edge = sh(in + nanprov() + " run -- " + python() + " " + example("tiny_transformer.py") +
                   " --steps 2 --glitch-step 1 2>&1");
  ASSERT_EQ(edge.code, 0) << edge.out;
  sh("sleep 0.01");  // run directories are named by the millisecond
  Result failed = sh(in + nanprov() + " run -- " + python() + " -c 'import sys; sys.exit(3)' 2>&1");
  ASSERT_EQ(failed.code, 3) << failed.out;
  Result report = sh(in + nanprov() + " report");
  EXPECT_EQ(report.code, 1) << report.out;
  EXPECT_NE(report.out.find("first non-finite edge"), std::string::npos) << report.out;
  json runs = json::parse(sh(in + nanprov() + " runs --json").out, nullptr, false);
  ASSERT_EQ(runs.size(), 2u) << runs.dump();
  EXPECT_EQ(runs[0]["outcome"], "nothing_checked");
  EXPECT_EQ(runs[0]["exit_code"], 3);
  EXPECT_EQ(runs[0]["ranks"], 0);
  EXPECT_EQ(runs[1]["outcome"], "edge");
  EXPECT_EQ(runs[1]["calls"], 8);
  EXPECT_NE(runs[1]["command"].get<std::string>().find("--glitch-step 1"), std::string::npos);
  Result text = sh(in + nanprov() + " runs");
  EXPECT_EQ(lines(text.out), 3) << text.out;
}

TEST_F(Hardening, CallsAlignsItsColumnsAndNamesMissingLayers) {
  Result table = sh(nanprov() + " calls " + recorded_->dir.string());
  ASSERT_EQ(table.code, 0) << table.out;
  std::istringstream in(table.out);
  std::string header, row;
  std::getline(in, header);
  size_t module_at = header.find("module");
  int rows = 0;
  while (std::getline(in, row)) {
    EXPECT_EQ(row.find("layers."), module_at) << "columns drift:\n" << header << "\n" << row;
    ++rows;
  }
  EXPECT_EQ(rows, 12);
  Result missing = sh(nanprov() + " calls " + recorded_->dir.string() + " --layer 7 2>&1");
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("no layer 7 in this run (its layers: 0-1)"), std::string::npos) << missing.out;
}

// More ranks than SQLite attaches at once (10): the query's tables are copied a batch of stores at a
// time, and joins across ranks, counts per rank and the read-only refusal behave as for one rank.
TEST_F(Hardening, SqlReadsMoreRanksThanSqliteAttaches) {
  fs::path dir = copy("many-ranks");
  const int ranks = 16;
  Result made = sh(python() + " -c \"import shutil, sqlite3, sys\n"
                   "d = sys.argv[1]\n"
                   "for r in range(1, int(sys.argv[2])):\n"
                   "    p = f'{d}/rank-{r}.sqlite'; shutil.copy(f'{d}/rank-0.sqlite', p); c = sqlite3.connect(p)\n"
                   "    c.execute('UPDATE meta SET value=? WHERE key=?', (str(r), 'rank')); c.execute('UPDATE calls SET rank=?', (r,))\n"
                   "    c.commit()\" '" + dir.string() + "' " + std::to_string(ranks) + " 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  Result one = sh(nanprov() + " sql " + recorded_->dir.string() + " \"SELECT COUNT(*) AS n FROM calls\" --json");
  json single = json::parse(one.out, nullptr, false);
  ASSERT_FALSE(single.is_discarded()) << one.out;
  int64_t per_rank = single[0]["n"].get<int64_t>();
  Result by_rank = sh(nanprov() + " sql " + dir.string() + " \"SELECT rank, COUNT(*) AS n FROM calls GROUP BY rank\" --json");
  json rows = json::parse(by_rank.out, nullptr, false);
  ASSERT_FALSE(rows.is_discarded()) << by_rank.out;
  ASSERT_EQ(rows.size(), static_cast<size_t>(ranks)) << by_rank.out;
  for (const json& row : rows) EXPECT_EQ(row["n"].get<int64_t>(), per_rank) << row.dump();
  Result joined = sh(nanprov() + " sql " + dir.string() +
                     " \"SELECT COUNT(DISTINCT c.rank) AS ranks FROM calls c JOIN tensors t ON t.rank = c.rank AND t.seq = c.seq\" --json");
  json across = json::parse(joined.out, nullptr, false);
  ASSERT_FALSE(across.is_discarded()) << joined.out;
  EXPECT_EQ(across[0]["ranks"], ranks);
  Result write = sh(nanprov() + " sql " + dir.string() + " \"DELETE FROM calls\" 2>&1");
  EXPECT_EQ(write.code, 3) << write.out;
  EXPECT_NE(write.out.find("read-only"), std::string::npos) << write.out;
  EXPECT_EQ(sh(nanprov() + " report " + dir.string() + " >/dev/null").code, 1);
}

TEST_F(Hardening, SqlIsReadOnlyAndOneStatement) {
  fs::path dir = copy("sql");
  fs::path elsewhere = dir / "elsewhere.db";
  struct Case {
    std::string query, says;
  };
  std::vector<Case> cases = {
      {"ATTACH DATABASE '" + elsewhere.string() + "' AS x", "read-only"},
      {"ATTACH '" + (dir / "rank-9.sqlite").string() + "' AS z", "read-only"},
      {"SELECT 1; DELETE FROM r0.calls", "one statement at a time"},
      {"SELECT fts3_tokenizer('simple')", "read-only"},
      {"DELETE FROM calls", "read-only"},
      {"PRAGMA query_only=OFF", "read-only"},
      {"", "empty query"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    Result r = sh(nanprov() + " sql " + dir.string() + " \"" + c.query + "\" 2>&1");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(elsewhere));
  EXPECT_FALSE(fs::exists(dir / "rank-9.sqlite"));
  EXPECT_EQ(sh(nanprov() + " report " + dir.string() + " >/dev/null 2>&1").code, 1) << "the run still reads";
  Result table_info = sh(nanprov() + " sql " + dir.string() + " \"PRAGMA table_info(calls)\"");
  EXPECT_EQ(table_info.code, 0) << table_info.out;
}

TEST(HardeningCli, BadValuesAreRefusedInOneLine) {
  fs::path dir = runDir("bad-values");
  for (std::string option : {"--capture-bytes -1", "--capture-every 99999999999999999999", "--capture-every -1",
                             "--inject 'tensor=O,tensor=dQ'", "--inject 'tensor=dQ,step=-1'",
                             "--capture 'rank=-1'", "--capture 'layer=1,layer=2'", "--probe-module ':q=0'",
                             "--probe-module 'Attn:z=1'", "--probe-module 'Attn:q=1-2'"}) {
    SCOPED_TRACE(option);
    Result r = sh(nanprov() + " run --out " + dir.string() + " " + option + " -- " + python() + " -c pass 2>&1");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_LE(lines(r.out), 2) << r.out;
    EXPECT_LT(r.out.size(), 300u) << "no 309-digit bounds: " << r.out;
    EXPECT_FALSE(fs::exists(dir)) << "a refused run leaves no directory";
  }
}

TEST(HardeningCli, CommandsThatCannotRunLeaveNothingBehind) {
  fs::path dir = runDir("cannot-run");
  struct Case {
    std::string command, says;
    int code;
  };
  for (const Case& c : std::vector<Case>{{NANPROV_EXAMPLES, "is a directory", 126},
                                         {"/etc/passwd", "is not executable", 126},
                                         {"no-such-command-here", "command not found", 127}}) {
    SCOPED_TRACE(c.command);
    Result r = sh(nanprov() + " run --out " + dir.string() + " -- " + c.command + " 2>&1");
    EXPECT_EQ(r.code, c.code) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(dir)) << r.out;
  }
}

}  // namespace
