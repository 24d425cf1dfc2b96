// The store budget (store/budget_keeper.h), through the writer: a long run stays under it, and
// what a diagnosis needs is still there.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <thread>

#include "store/reader.h"
#include "store/run_dir.h"
#include "store/writer.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
namespace {
namespace fs = std::filesystem;
using testing::freshDir;

constexpr int64_t kBudget = 256 << 10;
constexpr int kLayers = 4;

// Layer `layer`'s call in `step`: clean (`health` 0), with max |O| growing with the step, or with
// NaN in O, as a source edge (1) or propagated (2).
CallRecord callOf(int64_t seq, int64_t step, int layer, Phase phase, int health) {
  CallRecord c;
  c.seq = seq;
  c.step = step;
  c.layer = layer;
  c.call = step * 2 + (phase == Phase::kBackward);
  c.phase = phase;
  c.op = "aten::_scaled_dot_product_flash_attention_for_cpu";
  c.backend = "flash_cpu";
  c.module = "layers." + std::to_string(layer) + ".attn";
  c.start_ns = 1000 + seq * 10;
  c.end_ns = c.start_ns + 5;
  c.device = Device::cpu();
  const TensorShape shape = *TensorShape::parse("[2,4,8,16]");
  const DtypeName float32 = DtypeName::intern("Float");
  TensorHealth q{.role = Role::kQ, .dtype = float32, .shape = shape, .numel = 1024, .max_abs = 1.0};
  TensorHealth o{.role = Role::kO,
                 .dtype = float32,
                 .shape = shape,
                 .numel = 1024,
                 .nan = health ? 3 : 0,
                 .max_abs = 1.0 + static_cast<double>(step)};
  c.tensors = {q, o};
  c.health = health;
  return c;
}

int64_t bytesOnDisk(const fs::path& store) {
  int64_t bytes = 0;
  for (const char* suffix : {"", "-wal"}) {
    std::error_code ec;
    auto size = fs::file_size(store.string() + suffix, ec);
    if (!ec) bytes += static_cast<int64_t>(size);
  }
  return bytes;
}

// Writes `steps` steps of forward and backward calls per layer; layer 2's forward goes NaN at
// `edge_step` and later calls propagate. Checks the files against the budget every 100 steps.
// `paced` false: the calls come faster than the writer takes them, all in one batch. A call
// `captured` (a seq) gets a capture row, appended with the call.
int64_t writeRun(const fs::path& store, int64_t budget, int64_t steps, int64_t edge_step, int64_t* largest,
                 bool paced = true, int64_t captured = -1) {
  auto writer = StoreWriter::open(store.string(), {{"rank", "0"}}, budget);
  EXPECT_TRUE(writer.ok()) << writer.status().message();
  int64_t seq = 0;
  for (int64_t step = 0; step < steps; ++step) {
    for (Phase phase : {Phase::kForward, Phase::kBackward}) {
      for (int layer = 0; layer < kLayers; ++layer) {
        const bool bad = step >= edge_step && (step > edge_step || layer >= 2);
        const bool edge = step == edge_step && layer == 2 && phase == Phase::kForward;
        if (seq == captured) (*writer)->appendCapture({.seq = seq, .path = "captures/held.safetensors", .bytes = 1});
        (*writer)->append(callOf(seq++, step, layer, phase, edge ? 1 : bad ? 2 : 0));
      }
    }
    (*writer)->stepEnded(step, 1000 + seq * 10);
    // Paced like training (a step takes longer than its batch): the writer takes each step alone.
    while (paced && (*writer)->pendingCalls() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (paced && step % 100 == 99) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      *largest = std::max(*largest, bytesOnDisk(store));
    }
  }
  EXPECT_TRUE((*writer)->close().ok());
  *largest = std::max(*largest, bytesOnDisk(store));
  return seq;
}

TEST(StoreBudget, LongRunStaysUnderItAndKeepsEveryCallThatIsNotClean) {
  fs::path dir = freshDir("budget_long");
  const int64_t steps = 1500, edge_step = 1490;
  int64_t largest = 0;
  const int64_t calls = writeRun(dir / rankStoreName(0), kBudget, steps, edge_step, &largest);
  EXPECT_LE(largest, kBudget) << "the store and its WAL stay under the budget at every flush";

  auto run = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->total_calls, calls) << "summarised calls are still counted";
  EXPECT_TRUE(run->damage.empty()) << run->damage.front();
  const Summarised summarised = run->summarised();
  EXPECT_GT(summarised.calls, calls / 2) << "most of the run was summarised";
  EXPECT_GT(summarised.every, 1) << "the summaries were thinned";
  EXPECT_GT(summarised.first_step, 0) << "the first steps stay in full";
  EXPECT_LT(summarised.last_step, edge_step - 1) << "the steps before the edge stay in full";
  EXPECT_EQ(run->ranks.at(0).steps, steps) << "every step is counted, its row kept or not";
  auto step_rows = queryRun(dir.string(), "SELECT COUNT(*) FROM steps");
  ASSERT_TRUE(step_rows.ok()) << step_rows.status().message();
  EXPECT_LT(std::stoll(*step_rows->rows.at(0).at(0)), steps / 2) << "the steps table thins with the summaries";

  // Every call that was not clean is there, the edge first.
  int64_t not_clean = 0;
  CallQuery query;
  query.not_clean = true;
  ASSERT_TRUE(forEachCall(dir.string(), query, [&](const CallRecord&) { return ++not_clean, true; }).ok());
  EXPECT_EQ(not_clean, 2 * kLayers * (steps - edge_step) - 4) << "layers 0 and 1 were clean in the edge step";
  EXPECT_EQ(run->not_clean.calls, not_clean);

  // The summaries keep exact counts and maxima: the largest |O| of layer 0's forward is its last
  // summarised step's.
  auto sums = queryRun(dir.string(),
                       "SELECT SUM(calls), MAX(max_o), MAX(last_step), COUNT(max_dq) FROM step_summaries "
                       "WHERE layer = 0 AND phase = 'fwd'");
  ASSERT_TRUE(sums.ok()) << sums.status().message();
  const auto& row = sums->rows.at(0);
  EXPECT_EQ(std::stod(*row[1]), 1.0 + std::stod(*row[2]));
  EXPECT_EQ(*row[3], "0") << "a role the calls lacked stays NULL";
}

// A writer far behind (a burst of calls, each not clean with its tensor rows, all in one batch)
// writes them in chunks, each pruned after it: the file, which keeps its largest size, stays
// under the budget. Written in one transaction they took 3.2 MB of a 256 KiB budget. A call
// captured mid-burst stays in full: its capture is written before any chunk is pruned.
TEST(StoreBudget, ABurstFasterThanTheWriterStaysUnderIt) {
  fs::path dir = freshDir("budget_burst");
  int64_t largest = 0;
  const int64_t captured = 1500 * 2 * kLayers + 1;
  const int64_t calls = writeRun(dir / rankStoreName(0), kBudget, 3000, 10, &largest, false, captured);
  EXPECT_LE(largest, kBudget);
  auto held = queryRun(dir.string(), "SELECT COUNT(*) FROM calls WHERE seq = " + std::to_string(captured));
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(*held->rows.at(0).at(0), "1") << "the captured call was summarised away";
  auto run = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->total_calls, calls);
  EXPECT_GT(run->summarised().not_clean, calls / 2) << "the burst was summarised, not kept";
  // The calls held aside while the writer's queue was full come first in its batch: written in
  // step order, each summary row holds only its steps' calls, within its layer's trend.
  EXPECT_TRUE(run->damage.empty()) << run->damage.front();
}

// A call that reaches the writer after its step was summarised (a backward that came late) is
// summarised in rows of its own step: no summary row holds a step outside its range, and every
// reader finds the store consistent with its trends.
TEST(StoreBudget, ACallOfAStepAlreadySummarisedKeepsTheSummariesTruthful) {
  fs::path dir = freshDir("budget_late");
  auto writer = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}}, kBudget);
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  int64_t seq = 0;
  for (int64_t step = 0; step < 600; ++step) {
    for (int layer = 0; layer < kLayers; ++layer) (*writer)->append(callOf(seq++, step, layer, Phase::kForward, 0));
    (*writer)->stepEnded(step, 1000 + seq * 10);
    while ((*writer)->pendingCalls() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // Step 300's late call, its |O| the largest of the run: its own trend bucket and summary row.
  CallRecord late = callOf(seq++, 300, 0, Phase::kForward, 0);
  late.tensors[1].max_abs = 5000;
  (*writer)->append(late);
  for (int64_t step = 600; step < 700; ++step) {
    for (int layer = 0; layer < kLayers; ++layer) (*writer)->append(callOf(seq++, step, layer, Phase::kForward, 0));
    (*writer)->stepEnded(step, 1000 + seq * 10);
    while ((*writer)->pendingCalls() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_TRUE((*writer)->close().ok());
  auto run = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(run->damage.empty()) << run->damage.front();
  EXPECT_EQ(run->total_calls, seq);
  auto rows = queryRun(dir.string(),
                       "SELECT COUNT(*) FROM step_summaries WHERE max_o >= 5000 AND step <= 300 AND last_step >= 300");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  EXPECT_EQ(*rows->rows.at(0).at(0), "1") << "the late call is in a row whose steps include its own";
  auto held = queryRun(dir.string(), "SELECT COUNT(*) FROM calls WHERE step = 300");
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(*held->rows.at(0).at(0), "0") << "step 300 was summarised, before and after its late call";
}

TEST(StoreBudget, WithoutOneNothingIsSummarised) {
  fs::path dir = freshDir("budget_none");
  int64_t largest = 0;
  const int64_t calls = writeRun(dir / rankStoreName(0), 0, 300, 1000, &largest);
  auto run = loadRun(dir.string(), RunScope::kEdges);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->total_calls, calls);
  EXPECT_EQ(run->ranks.at(0).calls_stored, calls);
  EXPECT_EQ(run->summarised().calls, 0);
}

// The budget's summaries, the steps table and the trends derive from the calls: a store whose rows
// were edited by hand is read with a damaged line naming what disagrees, one per edit, and the
// run is never read as plainly consistent. The unedited store has none (the tests above).
TEST(StoreBudget, HandEditedDerivedTablesAreNamedAsDamage) {
  fs::path dir = freshDir("budget_edited");
  int64_t largest = 0;
  writeRun(dir / rankStoreName(0), kBudget, 1500, 1490, &largest);
  const fs::path original = dir / rankStoreName(0);
  struct Edit {
    const char* sql;
    const char* said;  // in the damage line
  };
  const Edit edits[] = {
      {"UPDATE step_summaries SET calls = calls + 5 WHERE step = (SELECT MIN(step) FROM step_summaries)",
       "step_summaries count"},
      {"UPDATE step_summaries SET not_clean = calls + 1 WHERE step = (SELECT MIN(step) FROM step_summaries)",
       "no summary can be"},
      {"UPDATE step_summaries SET last_step = step + 4096 WHERE step = (SELECT MIN(step) FROM step_summaries)",
       "more than meta.summary_every"},
      {"UPDATE meta SET value = '3' WHERE key = 'summary_every'", "not a power of two"},
      {"UPDATE meta SET value = '1' WHERE key = 'summary_every'", "more than meta.summary_every"},
      {"DELETE FROM steps WHERE step > 1400", "step rows were removed"},
      {"INSERT INTO steps VALUES (100000, 1)", "do not count those steps once each"},
      {"UPDATE trends SET calls = calls + 100 WHERE step = 0", "trends count"},
      {"UPDATE trends SET max_o = 0.5", "beyond their layer's trend"},
      {"UPDATE trends SET step = step + 1 WHERE layer = 0 AND step = (SELECT MAX(step) FROM trends WHERE layer = 0)",
       "no trend bucket can be"},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.sql);
    fs::path edited = freshDir("budget_edited_copy");
    fs::copy_file(original, edited / rankStoreName(0));
    {
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open((edited / rankStoreName(0)).c_str(), &db), SQLITE_OK);
      char* err = nullptr;
      const int rc = sqlite3_exec(db, e.sql, nullptr, nullptr, &err);
      const std::string why = err ? err : "";
      sqlite3_free(err);
      sqlite3_close(db);
      ASSERT_EQ(rc, SQLITE_OK) << why;
    }
    auto run = loadRun(edited.string(), RunScope::kEdges);
    ASSERT_TRUE(run.ok()) << run.status().message();
    std::string damage;
    for (const std::string& line : run->damage) damage += line + "\n";
    EXPECT_NE(damage.find(e.said), std::string::npos) << damage;
    EXPECT_NE(damage.find("rank 0's "), std::string::npos) << damage;
    fs::remove_all(edited);
  }
}

}  // namespace
}  // namespace nanprov::store
