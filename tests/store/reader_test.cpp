#include "store/reader.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/run_dir.h"
#include "store/writer.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
namespace {
namespace fs = std::filesystem;
using testing::freshDir;

void writeStore(const fs::path& dir, int rank, int calls) {
  auto w = StoreWriter::open((dir / rankStoreName(rank)).string(), {{"rank", std::to_string(rank)}});
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < calls; ++i) {
    CallRecord c;
    c.seq = i;
    c.rank = rank;
    c.op = "op";
    c.backend = "flash_cpu";
    c.start_ns = 100 * i + rank;
    (*w)->append(c);
  }
  ASSERT_TRUE((*w)->close().ok());
}

TEST(RunReader, MissingRunDirectoryIsAClearError) {
  auto dir = resolveRunDir("/nonexistent/run");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("no such run directory"), std::string::npos);
}

TEST(RunReader, EmptyRunDirectoryIsAClearError) {
  auto run = loadRun(freshDir("empty").string());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("holds no rank store"), std::string::npos);
}

TEST(RunReader, CorruptAndEmptyStoresAreRejectedWithOneLine) {
  fs::path dir = freshDir("corrupt");
  std::ofstream(dir / "rank-0.sqlite") << "this is not a database, just text that is long enough to matter"
                                       << std::string(4096, 'x');
  auto run = loadRun(dir.string());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("not a readable nanprov store"), std::string::npos);
  EXPECT_EQ(run.status().message().find('\n'), std::string::npos);

  fs::path empty = freshDir("zero");
  std::ofstream(empty / "rank-0.sqlite");
  run = loadRun(empty.string());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("empty file"), std::string::npos);
}

// A store that another program edited: a device or a capture trigger nanprov never writes is one
// clear line (printed escaped), not a guess.
TEST(RunReader, UnknownDeviceAndTriggerAreRejectedWithOneLine) {
  for (const char* edit : {"UPDATE signatures SET device = 'tpu:0'",
                           "INSERT INTO captures(seq,trigger,path,bytes) VALUES(0,'whim\x1b[31m','',0)"}) {
    fs::path dir = freshDir("edited");
    writeStore(dir, 0, 2);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir / rankStoreName(0)).c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, edit, nullptr, nullptr, nullptr), SQLITE_OK) << edit;
    sqlite3_close(db);
    auto run = loadRun(dir.string());
    ASSERT_FALSE(run.ok()) << edit;
    EXPECT_NE(run.status().message().find("unknown"), std::string::npos) << run.status().message();
    EXPECT_EQ(run.status().message().find_first_of("\n\x1b"), std::string::npos) << run.status().message();
  }
}

TEST(RunReader, MergesRanksInStepAndTimeOrder) {
  fs::path dir = freshDir("merge");
  writeStore(dir, 0, 3);
  writeStore(dir, 1, 3);
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->calls.size(), 6u);
  ASSERT_EQ(run->ranks.size(), 2u);
  for (size_t i = 1; i < run->calls.size(); ++i) {
    EXPECT_LE(run->calls[i - 1].start_ns, run->calls[i].start_ns);
  }
  EXPECT_EQ(run->calls[0].rank, 0);
  EXPECT_EQ(run->calls[1].rank, 1);
}

// A process killed before it learnt its rank left its store under its own name: it is read as the
// rank its meta guessed, unless another store holds that rank; a store the rank's name links to
// is read once.
TEST(RunReader, AStoreLeftUnderItsProcessNameIsReadAsItsGuessedRank) {
  fs::path dir = freshDir("process-store");
  writeStore(dir, 0, 2);
  for (auto [pid, guess] : {std::pair{41, 1}, std::pair{42, 0}}) {
    auto w = StoreWriter::open((dir / processStoreName(pid)).string(), {{"rank_guess", std::to_string(guess)}});
    ASSERT_TRUE(w.ok());
    CallRecord c;
    c.op = "op";
    c.backend = "flash_cpu";
    (*w)->append(c);
    (*w)->setRank(guess);
    ASSERT_TRUE((*w)->close().ok());
  }
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->ranks.size(), 2u) << "rank 0's own store, and process 41's as rank 1; process 42's rank is held";
  EXPECT_EQ(run->ranks[1].rank, 1);
  EXPECT_EQ(run->calls.size(), 3u);
  fs::create_symlink(processStoreName(41), dir / rankStoreName(1));
  auto linked = loadRun(dir.string());
  ASSERT_TRUE(linked.ok()) << linked.status().message();
  EXPECT_EQ(linked->ranks.size(), 2u);
  EXPECT_EQ(linked->calls.size(), 3u);
}

TEST(RunReader, SqlSeesAllRanksAndRefusesWrites) {
  fs::path dir = freshDir("sql");
  writeStore(dir, 0, 2);
  writeStore(dir, 1, 3);
  auto result = queryRun(dir.string(), "SELECT rank, COUNT(*) AS n FROM calls GROUP BY rank ORDER BY rank");
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->rows.size(), 2u);
  EXPECT_EQ(*result->rows[1][1], "3");
  EXPECT_EQ(result->columns[1], "n");

  for (const char* write : {"DELETE FROM calls", "DROP TABLE r0.calls", "INSERT INTO r0.meta VALUES('a','b')",
                            "UPDATE r0.calls SET step = 9"}) {
    auto refused = queryRun(dir.string(), write);
    EXPECT_FALSE(refused.ok()) << write;
  }
  auto still = queryRun(dir.string(), "SELECT COUNT(*) FROM calls");
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(*still->rows[0][0], "5");
}

}  // namespace
}  // namespace nanprov::store

namespace nanprov::store {
namespace {

// --trail's rows come back as written, in the order the module calls ended; a store without the
// table (written before it existed) reads as a run without --trail.
TEST(RunReader, ModuleChecksRoundTripAndOldStoresHaveNone) {
  fs::path dir = testing::freshDir("module-checks");
  {
    auto w = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}}, 0, {}, {.trail = true});
    ASSERT_TRUE(w.ok());
    ModuleCheckRecord m;
    m.step = 2, m.phase = Phase::kBackward, m.module = "h.0.mlp.act", m.module_class = "Act";
    m.inputs = ModuleInputs::kFinite, m.posinf = 3, m.largest_input = 0.5, m.order = 7, m.time_ns = 70;
    ModuleCheckRecord earlier = m;
    earlier.order = 4, earlier.module = "h.0.mlp.c_proj";
    earlier.unchecked_before = {"h.0.mlp.c_fc", "h.0"};
    earlier.inputs = ModuleInputs::kNone;
    (*w)->appendModuleChecks({m, earlier});
    CallRecord c;
    c.op = "op", c.backend = "math";
    (*w)->append(c);
    ASSERT_TRUE((*w)->close().ok());
  }
  auto run = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->module_checks.size(), 2u);
  EXPECT_TRUE(run->trailOn());
  const ModuleCheckRecord& first = run->module_checks[0];
  EXPECT_EQ(first.module, "h.0.mlp.c_proj");
  EXPECT_EQ(first.phase, Phase::kBackward);
  EXPECT_EQ(first.module_class, "Act");
  EXPECT_EQ(first.posinf, 3);
  EXPECT_DOUBLE_EQ(first.largest_input, 0.5);
  EXPECT_EQ(first.inputs, ModuleInputs::kNone);
  EXPECT_EQ(run->module_checks[1].inputs, ModuleInputs::kFinite);
  EXPECT_EQ(first.unchecked_before, (std::vector<std::string>{"h.0.mlp.c_fc", "h.0"}));
  EXPECT_TRUE(run->module_checks[1].unchecked_before.empty());

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / rankStoreName(0)).c_str(), &db), SQLITE_OK);
  // A store from before compiled modules were checked: no `unchecked` column.
  ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE module_checks DROP COLUMN unchecked", nullptr, nullptr, nullptr), SQLITE_OK);
  auto older = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(older.ok()) << older.status().message();
  ASSERT_EQ(older->module_checks.size(), 2u);
  EXPECT_TRUE(older->module_checks[0].unchecked_before.empty());
  // And from before the trail told a module handed no tensor apart: inputs_finite is all there is.
  ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE module_checks DROP COLUMN inputs", nullptr, nullptr, nullptr), SQLITE_OK);
  auto oldest = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(oldest.ok()) << oldest.status().message();
  EXPECT_EQ(oldest->module_checks[0].inputs, ModuleInputs::kNonFinite)
      << "a module handed no tensor never reads as finite";
  ASSERT_EQ(
      sqlite3_exec(db, "DROP TABLE module_checks; DELETE FROM meta WHERE key = 'trail'", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto old = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_TRUE(old->module_checks.empty());
  EXPECT_FALSE(old->trailOn());
}

// A window of a long run, centred on one call: the calls before it and half a window after it,
// never more than the window; without a centre, the first calls. (Each call of writeStore is one
// step here: step = seq.)
TEST(RunReader, AWindowCentredOnACallHoldsCallsOnBothSides) {
  fs::path dir = freshDir("window");
  {
    auto w = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}});
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 1000; ++i) {
      CallRecord c;
      c.seq = i, c.step = i, c.op = "op", c.backend = "flash_cpu", c.start_ns = 100 * i;
      (*w)->append(c);
    }
    ASSERT_TRUE((*w)->close().ok());
  }
  CallRecord centre;
  centre.rank = 0, centre.seq = 600;
  bool cut = false;
  auto window = loadRunWindow(dir.string(), CallQuery{.first_step = 100}, 100, &centre, &cut);
  ASSERT_TRUE(window.ok()) << window.status().message();
  ASSERT_EQ(window->calls.size(), 100u);
  EXPECT_TRUE(cut);
  EXPECT_EQ(window->calls.front().seq, 551) << "49 calls before the centre";
  EXPECT_EQ(window->calls.back().seq, 650) << "50 after it";
  auto first = loadRunWindow(dir.string(), CallQuery{}, 10, nullptr, &cut);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->calls.size(), 10u);
  EXPECT_EQ(first->calls.back().seq, 9);
  EXPECT_TRUE(cut);
  auto steps = loadRunWindow(dir.string(), CallQuery{.first_step = 990, .last_step = 995}, 100, nullptr, &cut);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->calls.size(), 6u);
  EXPECT_FALSE(cut);
}

}  // namespace
}  // namespace nanprov::store
