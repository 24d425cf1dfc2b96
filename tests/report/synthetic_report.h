// Report models made up for the renderers' unit tests: what buildReport would give, without a run.
#pragma once

#include <string>

#include "report/report.h"
#include "tests/report/synthetic_run.h"

namespace nanprov::synthetic {

// The facts of a one-rank training run of `calls` checked calls over `steps` steps.
inline report::RunOverview facts(int64_t calls = 24, int64_t steps = 6) {
  return report::RunOverview{.dir = "runs/edge",
                             .dirs = {"runs/edge"},
                             .calls = calls,
                             .steps = steps,
                             .ranks = {report::RankOverview{.rank = 0,
                                                            .store = "runs/edge/rank-0.sqlite",
                                                            .steps = steps,
                                                            .calls_stored = calls,
                                                            .meta = {{"host", "vm"}, {"world_size", "1"}},
                                                            .host = "vm",
                                                            .world_size = "1"}},
                             .world_size = 1,
                             .run_file_readable = true,
                             .command = {"python", "train.py"},
                             .torch = "2.13.0",
                             .exit_code = 0};
}

// A run whose layer-0 forward at step 3 made NaN in O from finite inputs as large as 9.3e19, the
// step's first attention call; captured, its kernel the ATen op.
inline report::Report edgeReport() {
  report::Report r{
      .run = facts(), .origin = report::Origin::kAttention, .propagation = {.calls = 12, .layers = 2, .ranks = 1}};
  CallRecord c = forward(0, 12, 3, 0, /*o_nan=*/2048, 9.3e19);
  c.call = 6;
  report::EdgeCall edge{.call = c, .health = classify(c), .largest_finite_input = 9.3e19};
  edge.kernels =
      report::KernelsOfCall{.kernels = {store::cpuKernelOf(c)}, .from = "run", .attribution = "the ATen CPU op"};
  edge.capture = report::EdgeCapture{.path = "runs/edge/captures/rank0-layer0-call6-fwd-seq12.safetensors"};
  r.first_edge = edge;
  r.first_source_edge = edge;
  r.input_trail = report::InputTrail{.largest = 9.3e19};
  r.conclusion.outcome = report::Outcome::kEdgeFound;
  r.conclusion.sentinel =
      report::SentinelFinding{.rank = 0, .step = 3, .gradients = {"embed.weight"}, .values = {"embed.weight"}};
  return r;
}

}  // namespace nanprov::synthetic
