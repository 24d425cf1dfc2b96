#include "store/run_counters_meta.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "store/reader.h"
#include "store/run_dir.h"
#include "store/writer.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
namespace {
namespace fs = std::filesystem;
using testing::freshDir;

// Every field said, each with a value of its own.
RunCounters everyCounter() {
  return RunCounters{
      .calls_written = 2,  // the writer's own count of the calls below
      .dropped_rows = 0,   // the writer's own, at close
      .store_budget = 1 << 20,
      .summarised = BudgetSummaries{.calls = 40, .not_clean = 3, .every = 4, .steps_thinned = 7},
      .step_unit = StepUnit::kForwardPass,
      .trail = true,
      .trail_compiled = true,
      .trail_compiled_backward = CompiledBackward::kUnchecked,
      .host_syncs = 7,
      .collectives_checked = 12,
      .backward_inherited = 24,
      .kernels_attributed = 310,
      .cupti_records = CuptiRecords{.kernel = 320, .external_id = 64, .api = 330},
      .cupti_dropped_records = 1,
      .cupti_detached = true,
      .deferred_checks = DeferredChecks{.mode = DeferMode::kCudaAndCpu,
                                        .deferred = 90,
                                        .batched_launches = 9,
                                        .modified = 2,
                                        .immediate_fallbacks = 1},
      .measure_launches = MeasureLaunches{.dense = 5, .fused = 6},
      .released_tensors = ReleasedTensors{.released = 11, .storages = 8},
      .capture_host_copies = 2,
      .audit_rotation = AuditRotation{.rotations = 3, .held_back = 1, .regime_changes = 2},
      .sentinel_nonfinite_grads = 4,
      .sentinel_nonfinite_params = 0,
      .unprobed = {{"flex_attention", 3}, {"aten::_native_multi_head_attention", 1}},
      .unprobed_first_step = {{"flex_attention", 2}, {"aten::_native_multi_head_attention", 0}},
      .probe_ns = {{"dispatching", 1500}, {"trail", 0}},
      .audit_regimes = {{"k0.r1", AuditRegime{.layer = 4,
                                              .phase = Phase::kBackward,
                                              .first_seen = 3,
                                              .last_seen = 5,
                                              .calls = 12,
                                              .last_judged = -1,
                                              .conditions = "mask |x| 3e+04, O 1"}}},
      .probe_cost = "dispatching 1.5 us a call\nflushing 0 us",
      .kernel_tracer = "torch.profiler held CUPTI",
      .mesh = "dp=0,tp=1",
      .module_class = {{"blocks.*.attn", "Attention"}, {"", "Outer"}},
  };
}

// What the writer wrote comes back field for field: a full record through a real store, part said
// as the store is made and part with a batch, as the probes say theirs.
TEST(RunCountersMeta, EveryCounterRoundTripsThroughAStore) {
  fs::path dir = freshDir("counters-roundtrip");
  const RunCounters all = everyCounter();
  {
    RunCounters at_open{.trail = all.trail, .mesh = all.mesh};
    auto w = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}}, 0, {}, at_open);
    ASSERT_TRUE(w.ok()) << w.status().message();
    RunCounters later = all;
    later.host_syncs = 1;
    (*w)->setCounters(later);
    (*w)->setCounters({.host_syncs = all.host_syncs});  // a later value replaces the earlier
    for (int i = 0; i < 2; ++i) {
      CallRecord c;
      c.seq = i, c.op = "op", c.backend = "flash_cpu";
      (*w)->append(c);
    }
    ASSERT_TRUE((*w)->close().ok());
  }
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  const RankInfo& r = run->ranks.at(0);
  EXPECT_EQ(r.counters, all);
  EXPECT_TRUE(r.counters_unreadable.empty());
  EXPECT_EQ(r.summaries().calls, 40);
  EXPECT_EQ(r.summaries().not_clean, 3);
  EXPECT_EQ(r.summaries().every, 4);
  // The rows are the texts the probes always wrote: `nanprov sql` and its users read them.
  const std::map<std::string, std::string> rows = {
      {"host_syncs", "7"},
      {"cupti_records", "kernel 320, external id 64, api 330"},
      {"deferred_checks",
       "CUDA and CPU calls: deferred 90, batched launches 9, modified before their check 2, "
       "immediate after a fallback 1"},
      {"measure_launches", "dense 5, fused 6"},
      {"released_tensors", "11 released, freeing 8 storages (the caching allocator's frees, moved from autograd)"},
      {"audit_rotation", "3 1 2"},
      {"trail", "1"},
      {"trail_compiled", "1"},
      {"trail_compiled_backward", "unchecked"},
      {"cupti_detached", "1"},
      {"step_unit", "forward_pass"},
      {"summary_every", "4"},
      {"steps_thinned", "7"},
      {"calls_summarised", "40"},
      {"not_clean_summarised", "3"},
      {"calls_written", "2"},
      {"dropped_rows", "0"},
      {"unprobed:flex_attention", "3"},
      {"unprobed_step:flex_attention", "2"},
      {"probe_ns:dispatching", "1500"},
      {"module_class:blocks.*.attn", "Attention"},
      {"module_class:", "Outer"},
      {"mesh", "dp=0,tp=1"},
      {"audit_regime:k0.r1", "4 bwd 3 5 12 -1 mask |x| 3e+04, O 1"},
  };
  for (const auto& [key, value] : rows) {
    ASSERT_TRUE(r.meta.count(key)) << key;
    EXPECT_EQ(r.meta.at(key), value) << key;
  }
  EXPECT_EQ(metaRowsOf(RunCounters{.deferred_checks = DeferredChecks{}}).at("deferred_checks"),
            "off (NANPROV_DEFER_CHECKS=0)");
  EXPECT_TRUE(metaRowsOf(RunCounters{}).empty()) << "a counter not said has no row";
}

// A value that is not what its writer writes reads as the old readers took it: as unsaid, or
// where they counted it as none, as 0 (never a number bent out of "12abc").
TEST(RunCountersMeta, ADamagedValueReadsAsUnsaid) {
  StoreMeta meta = {
      {"host_syncs", "12abc"},
      {"calls_written", "-3"},
      {"dropped_rows", " 4"},
      {"step_unit", "fortnight"},
      {"trail_compiled_backward", "maybe"},
      {"cupti_records", "kernel 1, api 2"},
      {"measure_launches", "dense 5, fused 6 more"},
      {"released_tensors", "11 released"},
      {"deferred_checks",
       "CUDA calls: deferred x, batched launches 1, modified before their check 0, immediate after a fallback 0"},
      {"audit_rotation", "3 x"},
      {"unprobed:flex_attention", "12abc"},
      {"unprobed_step:flex_attention", "soon"},
      {"probe_ns:naming", "1e3"},
      {"audit_regime:k0.r0", "4 sideways 3 5 12 -1 mask"},
      {"audit_regime:k0.r1", "4 fwd 5 3 12 -1 mask"},
      {"audit_regime:k0.r2", "4 fwd 3 5 12"},
      {"summary_every", "0"},
      {"calls_summarised", "10"},
  };
  std::string unreadable;
  const RunCounters c = runCountersOf(meta, &unreadable);
  EXPECT_FALSE(c.host_syncs);
  EXPECT_FALSE(c.calls_written);
  EXPECT_FALSE(c.dropped_rows);
  EXPECT_FALSE(c.step_unit);
  EXPECT_EQ(c.trail_compiled_backward, CompiledBackward::kNotCompiled);
  EXPECT_FALSE(c.cupti_records);
  EXPECT_FALSE(c.measure_launches);
  EXPECT_FALSE(c.released_tensors);
  EXPECT_FALSE(c.deferred_checks);
  EXPECT_EQ(c.audit_rotation, (AuditRotation{.rotations = 3, .held_back = 0})) << "each half on its own";
  EXPECT_EQ(c.unprobed.at("flex_attention"), 0) << "counted as none, its kind still named";
  EXPECT_EQ(c.unprobed_first_step.at("flex_attention"), 0);
  EXPECT_FALSE(c.probe_ns.count("naming"));
  EXPECT_TRUE(c.audit_regimes.empty()) << "a phase not named, a last step before the first, fields missing";
  EXPECT_EQ(c.summarised, (BudgetSummaries{.calls = 10, .not_clean = 0, .every = 1})) << "a width of 0 reads as 1";
  EXPECT_TRUE(unreadable.empty());
  EXPECT_EQ(runCountersOf({{"deferred_checks", "off (NANPROV_DEFER_CHECKS=0)"}}).deferred_checks, DeferredChecks{});
}

// The budget's counts are what a rank's totals rest on: a damaged one refuses the store, as before.
TEST(RunCountersMeta, ADamagedSummaryCountRefusesTheStore) {
  for (const auto& [key, value, why] : {std::tuple{"calls_summarised", "12abc", "meta.calls_summarised is not a count"},
                                        std::tuple{"not_clean_summarised", "41",
                                                   "meta.not_clean_summarised is not a count of "
                                                   "the calls summarised"},
                                        std::tuple{"steps_thinned", "-3", "meta.steps_thinned is not a count"}}) {
    fs::path dir = freshDir("counters-damaged");
    {
      auto w = StoreWriter::open((dir / rankStoreName(0)).string(), {{"rank", "0"}}, 0, {},
                                 {.summarised = BudgetSummaries{.calls = 40, .not_clean = 3, .every = 1}});
      ASSERT_TRUE(w.ok()) << w.status().message();
      (*w)->setMeta(key, value);
      ASSERT_TRUE((*w)->close().ok());
    }
    auto run = loadRun(dir.string());
    ASSERT_FALSE(run.ok()) << key;
    EXPECT_NE(run.status().message().find(why), std::string::npos) << run.status().message();
  }
}

}  // namespace
}  // namespace nanprov::store
