// `nanprov calls [RUN] [filters] [--json]`: the attention calls of a run, filtered.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>

#include "base/json_text.h"
#include "cli/commands.h"
#include "cli/report.h"

namespace nanprov::cli {
namespace {

struct Options {
  std::string run;
  std::optional<int> rank;
  std::optional<int64_t> layer, step;
  std::string phase, backend, module;
  bool nonfinite = false;
  bool json = false;
};

bool keep(const Options& o, const CallRecord& c, const CallHealth& h) {
  return (!o.rank || *o.rank == c.rank) && (!o.layer || *o.layer == c.layer) &&
         (!o.step || *o.step == c.step) && (o.phase.empty() || o.phase == phaseName(c.phase)) &&
         (o.backend.empty() || o.backend == c.backend) && (!o.nonfinite || h.kind != EdgeKind::kClean) &&
         (o.module.empty() || fnmatch(o.module.c_str(), c.module.c_str(), 0) == 0);
}

// A filter naming a layer or rank the run does not have matches nothing by mistake, not by
// finding: say which exist instead of printing an empty table.
std::string missingSelection(const Options& o, const RunData& run) {
  std::set<int64_t> layers, ranks;
  for (const CallRecord& c : run.calls) {
    layers.insert(c.layer);
    ranks.insert(c.rank);
  }
  auto range = [](const std::set<int64_t>& s) {
    return s.empty() ? std::string("none") : std::to_string(*s.begin()) + "-" + std::to_string(*s.rbegin());
  };
  if (o.layer && !layers.count(*o.layer)) {
    return "no layer " + std::to_string(*o.layer) + " in this run (its layers: " + range(layers) + ")";
  }
  if (o.rank && !ranks.count(*o.rank)) return "no rank " + std::to_string(*o.rank) + " in this run (its ranks: " + range(ranks) + ")";
  return "";
}

// Columns as wide as their widest cell, the last one unpadded: names and role lists of real runs
// (rank12:layer117:call40321, "Q,K,V,mask") outgrow any fixed width.
void printTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string roles(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& r : list) out += (out.empty() ? "" : ",") + r;
  return out.empty() ? "-" : out;
}

}  // namespace

void addCallsCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("calls", "List the attention calls of a run");
  cmd->footer(
      "Examples:\n"
      "  nanprov calls --nonfinite               calls that touched NaN/Inf\n"
      "  nanprov calls --rank 1 --layer 3 --phase bwd --json\n"
      "  nanprov calls --module '*.blocks.0.attn'        every stage's first block\n\n"
      "Columns: the call's name, its step (or forward pass, in inference runs), fwd/bwd (fwd* is a\n"
      "forward recomputed by activation checkpointing), backend, clean/source/propagated, the\n"
      "non-finite inputs and outputs, and the module path.");
  cmd->add_option("run", opts->run, "Run directory (default: the newest under ./nanprov-runs)");
  cmd->add_option("--rank", opts->rank, "Only this rank");
  cmd->add_option("--layer", opts->layer, "Only this layer");
  cmd->add_option("--step", opts->step, "Only this optimizer step");
  cmd->add_option("--phase", opts->phase, "Only fwd or bwd")->check(CLI::IsMember({"fwd", "bwd"}));
  cmd->add_option("--backend", opts->backend, "Only this backend (flash_cpu, math, cudnn, flash, efficient, native_mha)");
  cmd->add_option("--module", opts->module, "Only modules whose path matches this shell pattern (e.g. 'layers.3.*')");
  cmd->add_flag("--nonfinite", opts->nonfinite, "Only calls with a non-finite input or output");
  cmd->add_flag("--json", opts->json, "Print JSON for scripts");
  cmd->callback([opts, exit_code] {
    // --nonfinite reads only the calls that are not clean, through the store's index over them.
    auto run = openRun("calls", opts->run, exit_code, opts->nonfinite ? RunScope::kNotClean : RunScope::kAll);
    if (!run) return;
    std::string missing = opts->nonfinite ? "" : missingSelection(*opts, *run);
    if (!missing.empty()) {
      std::cerr << "nanprov calls: " << missing << "\n";
      return void(*exit_code = kUsageError);
    }
    nlohmann::json list = nlohmann::json::array();
    std::vector<std::vector<std::string>> rows = {{"call", "step", "phase", "backend", "kind", "bad in", "bad out", "module"}};
    for (const CallRecord& c : run->calls) {
      CallHealth h = classify(c);
      if (!keep(*opts, c, h)) continue;
      if (opts->json) {
        list.push_back(callJson(c, h));
      } else {
        rows.push_back({callName(c), std::to_string(c.step), std::string(phaseName(c.phase)) + (c.recompute ? "*" : ""),
                        c.backend, edgeKindName(h.kind), roles(h.nonfinite_inputs), roles(h.nonfinite_outputs),
                        (c.module.empty() ? "-" : c.module) + (c.injected.empty() ? "" : " (injected)")});
      }
    }
    if (opts->json) std::cout << jsonText(list, 2) << "\n";
    else printTable(rows);
    *exit_code = kClean;
  });
}

}  // namespace nanprov::cli
