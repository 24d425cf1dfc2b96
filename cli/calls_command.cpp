// `nanprov calls [RUN] [filters] [--json]`: the attention calls of a run, filtered.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "base/json_text.h"
#include "base/text.h"
#include "cli/commands.h"
#include "report/report_json.h"
#include "store/run_dir.h"

namespace nanprov::cli {
namespace {

struct Options {
  std::vector<std::string> run;
  std::optional<int> rank;
  std::optional<int64_t> layer, step;
  std::string phase, backend, module;
  bool nonfinite = false;
  bool json = false;
};

store::CallQuery queryOf(const Options& o) {
  store::CallQuery q;
  q.rank = o.rank;
  q.layer = o.layer;
  q.step = o.step;
  if (!o.phase.empty()) q.phase.emplace(o.phase == "fwd" ? Phase::kForward : Phase::kBackward);
  q.backend = o.backend;
  q.module_glob = o.module;
  q.not_clean = o.nonfinite;
  return q;
}

// A filter naming a layer or rank the run does not have matches nothing by mistake, not by
// finding: say which exist instead of printing an empty table. Asked only when nothing matched.
StatusOr<std::string> missingSelection(const Options& o, const store::RunDirs& dir) {
  for (const auto& [name, value] :
       {std::pair{"rank", o.rank ? std::optional<int64_t>(*o.rank) : std::nullopt}, std::pair{"layer", o.layer}}) {
    if (!value) continue;
    std::string column = name;
    NANPROV_ASSIGN_OR_RETURN(
        auto found, store::queryRun(dir, "SELECT MIN(" + column + "), MAX(" + column + "), MAX(" + column + " = " +
                                             std::to_string(*value) + ") FROM calls"));
    const auto& row = found.rows.at(0);
    if (row[2] && *row[2] == "1") continue;
    std::string range = row[0] ? *row[0] + "-" + *row[1] : "none";
    return "no " + column + " " + std::to_string(*value) + " in this run (its " + column + "s: " + range + ")";
  }
  return std::string();
}

// Rows of a table printed as they come, so a listing of millions starts at once and holds one
// row: columns are as wide as their widest cell in the first rows (names of real runs,
// rank12:layer117:call40321, outgrow any fixed width); a later, wider cell pushes its line only.
class StreamedTable {
 public:
  explicit StreamedTable(std::vector<std::string> header) { held_.push_back(std::move(header)); }
  ~StreamedTable() { flush(); }
  // Drops the rows held back (the header, when nothing matched and the command fails instead).
  void discard() { held_.clear(); }
  void add(std::vector<std::string> row) {
    for (std::string& cell : row) cell = printable(cell);  // a module name may hold a newline
    if (width_.empty() && held_.size() < kWidthRows) return held_.push_back(std::move(row));
    flush();
    print(row);
  }

 private:
  static constexpr size_t kWidthRows = 1000;
  void flush() {
    if (!width_.empty()) return;
    width_.assign(held_.front().size(), 0);
    for (const auto& row : held_) {
      for (size_t c = 0; c < row.size(); ++c) width_[c] = std::max(width_[c], row[c].size());
    }
    for (const auto& row : held_) print(row);
    held_.clear();
  }
  void print(const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width_[c] > row[c].size() ? width_[c] - row[c].size() + 2 : 2, ' ');
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  std::vector<std::vector<std::string>> held_;
  std::vector<size_t> width_;
};

// The calls the store budget summarised that the filters would have listed (their rows are gone;
// the module and backend filters cannot be asked of a summary): a line saying where they went, or "".
StatusOr<std::string> summarisedNote(const Options& o, const store::RunDirs& dir) {
  // A call that was not clean is summarised only in a run that stayed non-finite past its first
  // edge steps (a store written before that has no not_clean column, and summarised none).
  const char* count = o.nonfinite ? "not_clean" : "calls";
  std::string where = o.nonfinite ? "not_clean > 0" : "1";
  if (o.rank) where += " AND rank = " + std::to_string(*o.rank);
  if (o.layer) where += " AND layer = " + std::to_string(*o.layer);
  if (o.step) where += " AND " + std::to_string(*o.step) + " BETWEEN step AND last_step";
  if (!o.phase.empty()) where += " AND phase = '" + o.phase + "'";  // fwd or bwd, checked by the option
  NANPROV_ASSIGN_OR_RETURN(
      auto found, store::queryRun(dir, std::string("SELECT IFNULL(SUM(") + count +
                                           "), 0), MIN(step), MAX(last_step) FROM step_summaries WHERE " + where));
  const auto& row = found.rows.at(0);
  if (!row[0] || *row[0] == "0") return std::string();
  return *row[0] + (o.nonfinite ? " more calls that were not clean" : " more calls") + " of steps " + *row[1] + "-" +
         *row[2] +
         " were summarised by the store budget (counts and max |x| per step, layer and phase): "
         "nanprov sql \"SELECT * FROM step_summaries\"";
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
  addRunArgument(cmd, &opts->run);
  cmd->add_option("--rank", opts->rank, "Only this rank")->check(wholeNumber());
  cmd->add_option("--layer", opts->layer, "Only this layer")->check(wholeNumber());
  cmd->add_option("--step", opts->step, "Only this optimizer step")->check(wholeNumber());
  cmd->add_option("--phase", opts->phase, "Only fwd or bwd")->check(CLI::IsMember({"fwd", "bwd"}));
  cmd->add_option("--backend", opts->backend,
                  "Only this backend (flash_cpu, math, cudnn, flash, efficient, native_mha)");
  cmd->add_option("--module", opts->module, "Only modules whose path matches this shell pattern (e.g. 'layers.3.*')");
  cmd->add_flag("--nonfinite", opts->nonfinite, "Only calls with a non-finite input or output");
  addJsonFlag(cmd, &opts->json);
  cmd->callback([opts, exit_code] {
    auto dir = resolveRunDirs("calls", opts->run, exit_code);
    if (!dir) return;
    // Calls stream from the stores, filtered there, and go out as they come: a listing of a
    // 10M-call run holds one call at a time.
    int64_t shown = 0;
    std::optional<StreamedTable> table;
    std::optional<JsonArrayPrinter> list;
    if (opts->json) list.emplace();
    else
      table.emplace(
          std::vector<std::string>{"call", "step", "phase", "backend", "kind", "bad in", "bad out", "module"});
    Status read = store::forEachCall(*dir, queryOf(*opts), [&](const CallRecord& c) {
      CallHealth h = classify(c);
      if (list) {
        list->add(report::callJson(c, h));
      } else {
        table->add({callName(c), std::to_string(c.step), std::string(phaseName(c.phase)) + (c.recompute ? "*" : ""),
                    c.backend, edgeKindName(h.kind), roles(h.nonfinite_inputs), roles(h.nonfinite_outputs),
                    (c.module.empty() ? "-" : c.module) + (c.injected.empty() ? "" : " (injected)") +
                        (c.modified.empty() ? "" : " (" + c.modified + " modified before its check)")});
      }
      ++shown;
      return true;
    });
    std::string missing;
    std::string summarised;
    if (read.ok()) {
      auto note = summarisedNote(*opts, *dir);
      if (note.ok()) summarised = *note;
      else read = note.status();
    }
    if (read.ok() && shown == 0 && summarised.empty()) {
      auto asked = missingSelection(*opts, *dir);
      if (asked.ok()) missing = *asked;
      else read = asked.status();
    }
    if (table && !missing.empty()) table->discard();
    table.reset();
    list.reset();
    std::fflush(stdout);
    if (!read.ok()) return void(*exit_code = fail("calls", read));
    if (!missing.empty()) std::cerr << "nanprov calls: " << printable(missing) << "\n";
    if (!summarised.empty()) std::cerr << "nanprov calls: " << printable(summarised) << "\n";
    *exit_code = missing.empty() ? kClean : kUsageError;
  });
}

}  // namespace nanprov::cli
