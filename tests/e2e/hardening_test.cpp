// End-to-end: damaged, hostile and racing inputs. One real CPU training run is recorded once;
// each test damages a copy of it and runs the reading commands on that, asserting the answer is
// one line and an exit code, never an abort, a hang or a silent merge.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// The commands that read a run. Each must answer any damaged run in one line.
const std::vector<std::string> kReaders = {"report",  "report --json",  "calls",  "calls --json",
                                           "kernels", "kernels --json", "replay", "sql \"SELECT COUNT(*) FROM calls\""};

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

// `nanprov <reader> DIR`, with stdout dropped and stderr kept; `as` runs it through a wrapper.
Result read(const std::string& reader, const fs::path& dir, const std::string& as = "") {
  size_t space = reader.find(' ');
  std::string command = reader.substr(0, space);
  std::string rest = space == std::string::npos ? "" : reader.substr(space);
  return sh("timeout 30 " + as + nanprov() + " " + command + " " + dir.string() + rest + " 2>&1 >/dev/null");
}

// A real run with a source edge and its capture, recorded once for the suite.
class Hardening : public testing::Test {
 protected:
  static void SetUpTestSuite() { recorded_ = new TrainedRun(train("hardening", "", "--steps 3 --glitch-step 1")); }
  static void TearDownTestSuite() { delete recorded_; }

  // A fresh copy of the recorded run, to damage.
  fs::path copy(const std::string& name) {
    fs::path dir = runDir("hardening-" + name);
    fs::copy(recorded_->dir, dir, fs::copy_options::recursive);
    return dir;
  }

  static void sqlite(const fs::path& store, const std::string& statement) {
    Result r = sh(python() +
                  " -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); "
                  "c.commit()\" '" +
                  store.string() + "' \"" + statement + "\" 2>&1");
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

// Anything named like a rank store that is not one is refused by every reader in one line that
// names it (exit 3), never read as a run without attention, never counted as another rank, and
// never waited on (a FIFO would block open() forever).
TEST_F(Hardening, FilesNamedLikeStoresThatAreNotStoresAreRefusedInOneLine) {
  struct Case {
    std::string name, says;
    std::function<void(const fs::path&)> make;
  };
  const std::vector<Case> cases = {
      {"rank-1.sqlite", "is a FIFO", [](const fs::path& p) { ASSERT_EQ(mkfifo(p.c_str(), 0644), 0); }},
      {"rank-2.sqlite", "is a directory", [](const fs::path& p) { fs::create_directory(p); }},
      {"rank-3.sqlite", "is a device", [](const fs::path& p) { fs::create_symlink("/dev/zero", p); }},
      {"rank-4.sqlite", "is a link to nothing", [](const fs::path& p) { fs::create_symlink(p.string() + ".gone", p); }},
      {"rank-5.sqlite", "is a socket",
       [](const fs::path& p) {
         ASSERT_EQ(
             sh(python() + " -c \"import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])\" " + p.string())
                 .code,
             0);
       }},
      {"rank-\xd9\xa0.sqlite", "not as nanprov names them", [](const fs::path& p) { std::ofstream(p) << "x"; }},
      {"rank-99999999999.sqlite", "not as nanprov names them", [](const fs::path& p) { std::ofstream(p) << "x"; }},
      {"rank-00.sqlite", "not as nanprov names them",
       [this](const fs::path& p) { fs::copy_file(recorded_->dir / "rank-0.sqlite", p); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::path dir = copy("odd-" + std::to_string(&c - cases.data()));
    c.make(dir / c.name);
    for (const std::string& reader : kReaders) {
      Result r = read(reader, dir);
      EXPECT_EQ(r.code, 3) << reader << ": " << r.out;
      EXPECT_EQ(lines(r.out), 1) << reader << ": " << r.out;
      EXPECT_NE(r.out.find(c.says), std::string::npos) << reader << ": " << r.out;
    }
  }
  fs::path dir = copy("odd-again");
  ASSERT_EQ(mkfifo((dir / "rank-1.sqlite").c_str(), 0644), 0);
  Result again = sh("timeout 30 " + nanprov() + " run --out " + dir.string() + " -- " + python() + " -c pass 2>&1");
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find("already holds a run"), std::string::npos) << again.out;
}

// A store copied to another rank's name would be read twice, as two ranks: its meta says whose it is.
TEST_F(Hardening, AStoreUnderAnotherRanksNameIsRefused) {
  fs::path dir = copy("renamed");
  fs::copy_file(dir / "rank-0.sqlite", dir / "rank-1.sqlite");
  for (const std::string& reader : kReaders) {
    Result r = read(reader, dir);
    EXPECT_EQ(r.code, 3) << reader << ": " << r.out;
    EXPECT_EQ(lines(r.out), 1) << reader << ": " << r.out;
    EXPECT_NE(r.out.find("meta.rank is 0, but the file is named for rank 1"), std::string::npos)
        << reader << ": " << r.out;
  }
}

// Tables that compute their rows (a recursive view, a view of random blobs) would hang or flood
// every reader: refused before any row is read.
TEST_F(Hardening, TablesThatAreViewsAreRefused) {
  const std::vector<std::string> views = {
      "CREATE VIEW calls AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x AS seq FROM r",
      "CREATE VIEW calls AS SELECT randomblob(200000000) AS seq"};
  for (const std::string& view : views) {
    SCOPED_TRACE(view);
    fs::path dir = copy("view-" + std::to_string(&view - views.data()));
    sqlite(dir / "rank-0.sqlite", "DROP TABLE calls");
    sqlite(dir / "rank-0.sqlite", view);
    for (const std::string& reader : kReaders) {
      Result r = read(reader, dir);
      EXPECT_EQ(r.code, 3) << reader << ": " << r.out;
      EXPECT_EQ(lines(r.out), 1) << reader << ": " << r.out;
      EXPECT_NE(r.out.find("its calls is a view whose rows are computed"), std::string::npos)
          << reader << ": " << r.out;
    }
  }
}

// run.json is opened as the stores are: a FIFO or a huge file neither hangs nor floods a reader.
TEST_F(Hardening, RunFilesThatAreFifosOrHugeAreBounded) {
  fs::path root = runDir("run-json-root");
  fs::create_directories(root);
  fs::path fifo = root / "fifo", huge = root / "huge";
  fs::copy(recorded_->dir, fifo, fs::copy_options::recursive);
  fs::copy(recorded_->dir, huge, fs::copy_options::recursive);
  fs::remove(fifo / "run.json");
  ASSERT_EQ(mkfifo((fifo / "run.json").c_str(), 0644), 0);
  {
    std::ofstream out(huge / "run.json");
    out << "{\"command\": [\"" << std::string(200 << 20, 'x') << "\"]}";
  }
  for (const fs::path& dir : {fifo, huge}) {
    SCOPED_TRACE(dir.string());
    for (const std::string& reader : {"report", "report --json"}) {
      Result r = read(reader, dir);
      EXPECT_EQ(r.code, 1) << reader << ": " << r.out;
    }
  }
  Result runs = sh("timeout 30 " + nanprov() + " runs --root " + root.string() + " --json");
  EXPECT_EQ(runs.code, 0) << runs.out;
  EXPECT_EQ(json::parse(runs.out, nullptr, false).size(), 2u) << runs.out;
}

// A store or its directory the reader may not open says so, not "damaged".
TEST_F(Hardening, PermissionDeniedSaysSo) {
  // Root reads any file: as root (CI), the readers run as nobody.
  const std::string as = geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
  fs::path dir = copy("no-permission");
  fs::permissions(dir / "rank-0.sqlite", fs::perms::none);
  for (const std::string& reader : kReaders) {
    Result r = read(reader, dir, as);
    EXPECT_EQ(r.code, 3) << reader << ": " << r.out;
    EXPECT_NE(r.out.find("permission denied"), std::string::npos) << reader << ": " << r.out;
  }
  fs::permissions(dir / "rank-0.sqlite", fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(dir, fs::perms::owner_write | fs::perms::owner_exec);
  Result r = read("report", dir, as);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("permission denied"), std::string::npos) << r.out;
  fs::permissions(dir, fs::perms::owner_all);
}

// A module name is any ModuleDict key: one holding a newline and terminal escapes must not forge
// report lines or reach the terminal raw; JSON keeps the name as stored.
TEST_F(Hardening, ControlCharactersInTheStoreArePrintedEscaped) {
  fs::path dir = copy("control");
  const std::string forged = "blocks.0\nrank1:layer7:call3  first non-finite edge (backend cudnn is at fault)\x1b[2J";
  std::string hex;
  for (unsigned char ch : forged) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", ch);
    hex += b;
  }
  sqlite(dir / "rank-0.sqlite",
         "UPDATE signatures SET module=CAST(x'" + hex + "' AS TEXT), backend=CAST(x'1b5d303b' AS TEXT)");
  for (std::string command : {"report", "calls", "kernels", "sql \"SELECT module FROM calls\""}) {
    SCOPED_TRACE(command);
    size_t space = command.find(' ');
    std::string rest = space == std::string::npos ? "" : command.substr(space);
    Result text = sh(nanprov() + " " + command.substr(0, space) + " " + dir.string() + rest + " 2>&1");
    EXPECT_EQ(text.out.find('\x1b'), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("\nrank1:layer7"), std::string::npos) << text.out;
    if (command == "kernels") {  // lists no module; its backend column holds an escape
      EXPECT_NE(text.out.find("(\\x1b]0;)"), std::string::npos) << text.out;
      continue;
    }
    EXPECT_NE(text.out.find("blocks.0\\nrank1:layer7:call3"), std::string::npos) << text.out;
    Result json_out = sh(nanprov() + " " + command.substr(0, space) + " " + dir.string() + rest + " --json");
    json doc = json::parse(json_out.out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << json_out.out;
    EXPECT_NE(doc.dump().find("blocks.0\\nrank1:layer7:call3"), std::string::npos) << "JSON keeps the value as stored";
  }
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
  EXPECT_EQ(calls[0]["module"],
            "\xef\xbf\xbd\xef\xbf\xbd"
            "A")
      << "each invalid byte became U+FFFD";
}

// Format characters are not control characters but change how a line reads: U+202E makes a
// module name read as another, U+2028/U+2029 break lines in some terminals and pages. The text,
// the page and the file names in errors show them as escapes; JSON keeps the value as stored.
TEST_F(Hardening, DirectionOverridesAndLineSeparatorsArePrintedEscaped) {
  fs::path dir = copy("format-chars");
  // "blocks.0" U+202E "nttа" U+2028 "x" U+2029 "y"
  sqlite(dir / "rank-0.sqlite",
         "UPDATE signatures SET module=CAST(x'626c6f636b732e30e280ae6e7474e280a878e280a979' AS TEXT)");
  const std::string raw[] = {"\xe2\x80\xae", "\xe2\x80\xa8", "\xe2\x80\xa9"};
  fs::path page = dir / "page.html";
  for (std::string command : {std::string("report"), std::string("calls"), "report --html " + page.string()}) {
    SCOPED_TRACE(command);
    size_t space = command.find(' ');
    std::string rest = space == std::string::npos ? "" : command.substr(space);
    Result text = sh(nanprov() + " " + command.substr(0, space) + " " + dir.string() + rest + " 2>&1");
    std::string shown = command.rfind("report --html", 0) == 0 ? sh("cat " + page.string()).out : text.out;
    for (const std::string& r : raw) EXPECT_EQ(shown.find(r), std::string::npos) << shown.substr(0, 2000);
    EXPECT_NE(shown.find("blocks.0\\u202entt\\u2028x\\u2029y"), std::string::npos) << shown.substr(0, 2000);
  }
  json doc = commandJson("report", dir);
  EXPECT_EQ(doc["first_edge"]["module"], "blocks.0\xe2\x80\xaentt\xe2\x80\xa8x\xe2\x80\xa9y") << "JSON keeps the value";
  // A file name in an error: one line, the newline and the override escaped.
  fs::path odd = copy("odd-name");
  std::ofstream(odd / "rank-1\nnanprov report: forged\xe2\x80\xae.sqlite") << "x";
  Result err = sh(nanprov() + " report " + odd.string() + " 2>&1 >/dev/null");
  EXPECT_EQ(lines(err.out), 1) << err.out;
  EXPECT_NE(err.out.find("rank-1\\nnanprov report: forged\\u202e.sqlite"), std::string::npos) << err.out;
}

// The call tally is a count another process wrote: believed only where the store agrees. Garbage,
// overflowing values and a tally below what was stored are damage, said once; a rank with a tally
// and no store counts; and a new run never counts on from an old tally.
TEST_F(Hardening, TheCallTallyIsCheckedAgainstTheStore) {
  auto writeTally = [](const fs::path& file, const std::string& eight_bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << eight_bytes;
  };
  const int64_t stored = recorded_->doc["coverage"]["attention_calls"];
  ASSERT_GT(stored, 0);
  struct Case {
    const char* name;
    std::string rank0, rank1;  // tallies; rank 1 has no store
    int64_t not_stored;
    size_t damage;
  };
  const Case cases[] = {
      {"text", "NANPROV!", "", 0, 1},
      {"int64-max", littleEndian(INT64_MAX), littleEndian(INT64_MAX), 0, 2},
      {"below-stored", littleEndian(stored - 1), "", 0, 1},
      {"rank-without-store", littleEndian(stored + 3), littleEndian(5), 8, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::path dir = copy(std::string("tally-") + c.name);
    writeTally(dir / "rank-0.tally", c.rank0);
    if (!c.rank1.empty()) writeTally(dir / "rank-1.tally", c.rank1);
    json doc = commandJson("report", dir);
    EXPECT_EQ(doc["coverage"]["calls_not_stored"], c.not_stored) << doc["coverage"].dump();
    EXPECT_EQ(doc["coverage"]["damage"].size(), c.damage) << doc["coverage"].dump();
    Result text = sh(nanprov() + " report " + dir.string() + " 2>&1");
    EXPECT_EQ(text.out.find("the last -"), std::string::npos) << text.out;
    size_t said = 0;
    for (size_t at = text.out.find("damaged: "); at != std::string::npos; at = text.out.find("damaged: ", at + 1))
      ++said;
    EXPECT_EQ(said, c.damage) << text.out;
    if (c.damage) EXPECT_NE(text.out.find("call tally says"), std::string::npos) << text.out;
  }
  // A folder holding only an old tally is an old run's: a new run is refused, not counted on.
  fs::path stale = runDir("stale-tally");
  fs::create_directories(stale);
  writeTally(stale / "rank-0.tally", littleEndian(1000));
  Result again = sh(nanprov() + " run --out " + stale.string() + " -- " + python() + " " +
                    example("tiny_transformer.py") + " --steps 1 2>&1");
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find("already holds a run"), std::string::npos) << again.out;
}

// Rows deleted from a store: the report counts what is there and says the store lost rows,
// never "N calls checked" from the writer's own count.
TEST_F(Hardening, DeletedCallRowsAreCountedAsDamage) {
  fs::path dir = copy("deleted-rows");
  sqlite(dir / "rank-0.sqlite", "DELETE FROM calls WHERE seq >= 4");
  json doc = commandJson("report", dir);
  json left = json::parse(sh(nanprov() + " sql " + dir.string() + " \"SELECT COUNT(*) AS n FROM calls\" --json").out,
                          nullptr, false);
  ASSERT_FALSE(left.is_discarded());
  EXPECT_EQ(doc["coverage"]["attention_calls"], left[0]["n"]) << doc["coverage"].dump();
  ASSERT_EQ(doc["coverage"]["damage"].size(), 1u) << doc["coverage"].dump();
  EXPECT_NE(doc["coverage"]["damage"][0].get<std::string>().find("rows were deleted"), std::string::npos);
  Result text = sh(nanprov() + " report " + dir.string() + " 2>&1");
  EXPECT_NE(text.out.find(std::to_string(left[0]["n"].get<int64_t>()) + " attention calls checked"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("damaged: rank 0's store holds"), std::string::npos) << text.out;
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
  Result replay =
      sh(nanprov() + " replay " + (dir / "captures" / "rank0-layer0-call0-fwd-seq0.safetensors").string() + " --json");
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
  ASSERT_EQ(edge.code, 1) << "the training exited 0 and went NaN: " << edge.out;
  sh("sleep 0.01");  // run directories are named by the millisecond
  Result failed = sh(in + nanprov() + " run -- " + python() + " -c 'import sys; sys.exit(3)' 2>&1");
  ASSERT_EQ(failed.code, 3) << failed.out;
  Result report = sh(in + nanprov() + " report");
  EXPECT_EQ(report.code, 1) << report.out;
  EXPECT_NE(report.out.find("first non-finite edge"), std::string::npos) << report.out;
  json runs = json::parse(sh(in + nanprov() + " runs --json").out, nullptr, false);
  ASSERT_EQ(runs.size(), 2u) << runs.dump();
  expectFields(runs[0], {{"outcome", "nothing_checked"}, {"exit_code", 3}, {"ranks", 0}});
  EXPECT_EQ(runs[1]["outcome"], "edge");
  EXPECT_EQ(runs[1]["calls"], 8);
  EXPECT_NE(runs[1]["command"].get<std::string>().find("--glitch-step 1"), std::string::npos);
  Result text = sh(in + nanprov() + " runs");
  EXPECT_EQ(lines(text.out), 3) << text.out;
}

// Runs named by --out under the root are ordered by when they started, not by name: the newest
// is listed first and is what commands read by default.
TEST(HardeningTraining, RunsAreNewestFirstByStartTimeWhateverTheirNames) {
  fs::path cwd = runDir("runs-order");
  fs::create_directories(cwd);
  std::string in = "cd " + cwd.string() + " && ";
  for (const char* name : {"zzz-older", "aaa-newer"}) {
    Result r = sh(in + nanprov() + " run --out nanprov-runs/" + name + " -- " + python() + " " +
                  example("tiny_transformer.py") + " --steps 1 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  json runs = json::parse(sh(in + nanprov() + " runs --json").out, nullptr, false);
  ASSERT_EQ(runs.size(), 2u) << runs.dump();
  EXPECT_EQ(runs[0]["run"], "nanprov-runs/aaa-newer") << runs.dump(1);
  EXPECT_EQ(runs[1]["run"], "nanprov-runs/zzz-older") << runs.dump(1);
  Result report = sh(in + nanprov() + " report 2>&1");
  EXPECT_NE(report.out.find("run nanprov-runs/aaa-newer:"), std::string::npos) << report.out;
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
  Result made = sh(python() +
                   " -c \"import shutil, sqlite3, sys\n"
                   "d = sys.argv[1]\n"
                   "for r in range(1, int(sys.argv[2])):\n"
                   "    p = f'{d}/rank-{r}.sqlite'; shutil.copy(f'{d}/rank-0.sqlite', p); c = sqlite3.connect(p)\n"
                   "    c.execute('UPDATE meta SET value=? WHERE key=?', (str(r), 'rank')); c.execute('UPDATE calls "
                   "SET rank=?', (r,))\n"
                   "    c.commit()\" '" +
                   dir.string() + "' " + std::to_string(ranks) + " 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  Result one = sh(nanprov() + " sql " + recorded_->dir.string() + " \"SELECT COUNT(*) AS n FROM calls\" --json");
  json single = json::parse(one.out, nullptr, false);
  ASSERT_FALSE(single.is_discarded()) << one.out;
  int64_t per_rank = single[0]["n"].get<int64_t>();
  Result by_rank =
      sh(nanprov() + " sql " + dir.string() + " \"SELECT rank, COUNT(*) AS n FROM calls GROUP BY rank\" --json");
  json rows = json::parse(by_rank.out, nullptr, false);
  ASSERT_FALSE(rows.is_discarded()) << by_rank.out;
  ASSERT_EQ(rows.size(), static_cast<size_t>(ranks)) << by_rank.out;
  for (const json& row : rows) EXPECT_EQ(row["n"].get<int64_t>(), per_rank) << row.dump();
  Result joined = sh(nanprov() + " sql " + dir.string() +
                     " \"SELECT COUNT(DISTINCT c.rank) AS ranks FROM calls c JOIN tensors t ON t.rank = c.rank AND "
                     "t.seq = c.seq\" --json");
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
      {"SELECT 1; DELETE FROM calls", "one statement at a time"},
      {"SELECT fts3_tokenizer('simple')", "read-only"},
      {"DELETE FROM calls", "read-only"},
      {"PRAGMA query_only=OFF", "read-only"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    Result r = sh(nanprov() + " sql " + dir.string() + " \"" + c.query + "\" 2>&1");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
  }
  Result empty = sh(nanprov() + " sql " + dir.string() + " '' 2>&1");
  EXPECT_EQ(empty.code, 2) << "an empty query is a usage error: " << empty.out;
  EXPECT_NE(empty.out.find("empty query"), std::string::npos) << empty.out;
  EXPECT_FALSE(fs::exists(elsewhere));
  EXPECT_FALSE(fs::exists(dir / "rank-9.sqlite"));
  EXPECT_EQ(sh(nanprov() + " report " + dir.string() + " >/dev/null 2>&1").code, 1) << "the run still reads";
  Result table_info = sh(nanprov() + " sql " + dir.string() + " \"PRAGMA table_info(calls)\"");
  EXPECT_EQ(table_info.code, 0) << table_info.out;
}

// An endless recursive query and one that concatenates gigabytes end within their bounds, in one line.
TEST_F(Hardening, SqlIsBoundInTimeAndMemory) {
  const std::string endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r";
  Result slow =
      sh("timeout 60 " + nanprov() + " sql " + recorded_->dir.string() + " \"" + endless + "\" --timeout 1 2>&1");
  EXPECT_EQ(slow.code, 3) << slow.out;
  EXPECT_EQ(lines(slow.out), 1) << slow.out;
  EXPECT_NE(slow.out.find("interrupted: the query ran longer than 1 s"), std::string::npos) << slow.out;
  const std::string big =
      "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 20000000) "
      "SELECT length(group_concat(printf('%050d', x))) FROM r";
  Result heavy =
      sh("timeout 60 " + nanprov() + " sql " + recorded_->dir.string() + " \"" + big + "\" --max-memory 64M 2>&1");
  EXPECT_EQ(heavy.code, 3) << heavy.out;
  EXPECT_EQ(lines(heavy.out), 1) << heavy.out;
  EXPECT_NE(heavy.out.find("needs more than 64 MiB of memory"), std::string::npos) << heavy.out;
}

// What a new user trips on: `run --help` shows where the command goes; an option's dependencies
// read as words, not glued to its value's name; a script named without `--` and its interpreter
// is a file here, and the error says how to run it.
TEST(HardeningCli, HelpAndTheFirstCommandTeach) {
  Result help = sh(nanprov() + " run --help");
  EXPECT_NE(help.out.find("Usage: nanprov run [OPTIONS] -- CMD [ARGS...]"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--audit-every N  (with --audit)"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("Needs:"), std::string::npos) << help.out;
  fs::path here = runDir("no-dashes");
  fs::create_directories(here);
  std::ofstream(here / "train.py") << "print('trained')\n";
  Result bare = sh("cd " + here.string() + " && " + nanprov() + " run train.py 2>&1");
  EXPECT_EQ(bare.code, 126) << bare.out;
  EXPECT_EQ(bare.out,
            "nanprov run: train.py is a file here, not a command on PATH: run it through its interpreter, e.g. "
            "nanprov run -- python train.py\n");
  EXPECT_FALSE(fs::exists(here / "nanprov-runs")) << "a command that cannot start leaves no run behind";
}

TEST(HardeningCli, BadValuesAreRefusedInOneLine) {
  fs::path dir = runDir("bad-values");
  for (std::string option : {"--capture-bytes -1",
                             "--capture-every 99999999999999999999",
                             "--capture-every -1",
                             "--inject 'tensor=O,tensor=dQ'",
                             "--inject 'tensor=dQ,step=-1'",
                             "--capture 'rank=-1'",
                             "--capture 'layer=1,layer=2'",
                             "--probe-module ':q=0'",
                             "--probe-module 'Attn:z=1'",
                             "--probe-module 'Attn:q=1-2'",
                             "--inject 'tensor=O,,layer=1'",
                             "--inject 'tensor=O,layer=1,'",
                             "--inject 'tensor=O,rank=-0'",
                             "--capture-bytes 0x10",
                             "--capture-every ' 3'",
                             "--probe-module 'Attn:q=99999999999999999999'",
                             "--probe-op 'ns::op:q=in put'",
                             "--out ''",
                             "--no-such-option",
                             "--audit --audit"}) {
    SCOPED_TRACE(option);
    Result r = sh(nanprov() + " run --out " + dir.string() + " " + option + " -- " + python() + " -c pass 2>&1");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_LT(r.out.size(), 300u) << "no 309-digit bounds: " << r.out;
    EXPECT_FALSE(fs::exists(dir)) << "a refused run leaves no directory";
  }
}

// The reading commands refuse malformed values as usage errors (exit 2), in one line.
TEST_F(Hardening, ReadersRefuseMalformedValuesInOneLine) {
  const std::string dir = recorded_->dir.string();
  for (std::string command : {"calls " + dir + " --step -1", "calls " + dir + " --layer ' 1'",
                              "replay " + dir + " --backends ''", "replay " + dir + " --backends 'math,,'",
                              "report " + dir + " --json --json", "kernels " + dir + " --call rank0:layerX:call1",
                              std::string("runs --root ''"), "sql " + dir + " ''", "report " + dir + " --bogus"}) {
    SCOPED_TRACE(command);
    Result r = sh(nanprov() + " " + command + " 2>&1 >/dev/null");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
  }
}

// A run folder named with U+202E, U+2028, U+2029, U+0085 and an escape: `nanprov run` prints it
// through the report's escaping, in every line it writes (it once printed "recording into" raw).
TEST(HardeningCli, TheRunsOwnLinesEscapeItsFolderName) {
  const std::string hostile = "run\xe2\x80\xae-\xe2\x80\xa8-\xe2\x80\xa9-\xc2\x85-\x1b[2J";
  const fs::path dir = runDir("hostile") / hostile;
  Result r = sh(nanprov() + " run --out '" + dir.string() + "' -- " + python() + " " + example("tiny_transformer.py") +
                " --steps 1 2>&1 >/dev/null");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("recording into "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run\\u202e-\\u2028-\\u2029-\\u0085-\\x1b[2J"), std::string::npos) << r.out;
  for (const char* raw : {"\xe2\x80\xae", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xc2\x85", "\x1b"}) {
    EXPECT_EQ(r.out.find(raw), std::string::npos) << r.out;
  }
  fs::remove_all(dir.parent_path());
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
