// `nanprov trace [RUN] --out FILE`: the run as a timeline for ui.perfetto.dev and chrome://tracing.
// A window of it: a trace holds at most --max-calls calls (by default around the first edge), so a
// run of any length is written in bounded memory.
#include <algorithm>
#include <iostream>

#include "base/json_text.h"
#include "base/numbers.h"
#include "base/text.h"
#include "cli/commands.h"
#include "report/edges.h"
#include "report/perfetto_trace.h"
#include "report/report_text.h"
#include "report/timeline.h"
#include "store/file_replace.h"

namespace nanprov::cli {
namespace {

// What one call costs while its trace is built (the call, its slices and their JSON), measured at
// about 6.4 KB: the default keeps a trace's memory near 160 MB.
constexpr int64_t kDefaultMaxCalls = 25'000;
// The most a trace may hold: about 650 MB while it is written. A window of a run is what a trace
// viewer opens anyway; a larger value is refused in one line rather than met with bad_alloc.
constexpr int64_t kMostCalls = 100'000;

struct Options {
  std::vector<std::string> run;
  std::string out;
  std::string steps;  // "A:B", "A:", ":B" or "S"
  std::string ranks;  // "0,3"
  int64_t max_calls = kDefaultMaxCalls;
};

// "A:B" (both ends included), "A:", ":B" or "S", into the query's step window.
Status parseSteps(const std::string& text, store::CallQuery* q) {
  const size_t colon = text.find(':');
  auto step = [](const std::string& part) { return parseInteger(part, 0, INT64_MAX); };
  const std::string first = text.substr(0, colon), last = colon == std::string::npos ? first : text.substr(colon + 1);
  if (!first.empty() && !(q->first_step = step(first)))
    return Status::Error("bad --steps '" + text + "': '" + first + "' is not a step");
  if (!last.empty() && !(q->last_step = step(last)))
    return Status::Error("bad --steps '" + text + "': '" + last + "' is not a step");
  if (text.empty() || text == ":")
    return Status::Error("--steps '" + text + "' names no step (example: --steps 100:120)");
  if (q->first_step && q->last_step && *q->first_step > *q->last_step) {
    return Status::Error("bad --steps '" + text + "': the first step is after the last");
  }
  return Status::Ok();
}

Status parseRanks(const std::string& text, store::CallQuery* q) {
  for (const std::string& part : splitList(text, ',')) {
    auto rank = parseInteger(part, 0, kMaxRank);
    if (!rank) return Status::Error("bad --ranks '" + text + "': '" + part + "' is not a rank (example: --ranks 0,3)");
    q->ranks.insert(static_cast<int>(*rank));
  }
  if (q->ranks.empty()) return Status::Error("--ranks '" + text + "' names no rank (example: --ranks 0,3)");
  return Status::Ok();
}

// Where in the window a call of the whole run is, by (rank, seq).
std::optional<size_t> indexIn(const store::RunData& window, const store::RunData& whole, std::optional<size_t> call) {
  if (!call) return std::nullopt;
  const CallRecord& c = whole.calls[*call];
  for (size_t i = 0; i < window.calls.size(); ++i) {
    if (window.calls[i].rank == c.rank && window.calls[i].seq == c.seq) return i;
  }
  return std::nullopt;
}

// Whether the trace drew a summarised stretch (one with no recorded end around it has none).
bool marked(const nlohmann::json& trace) {
  const nlohmann::json& events = trace["traceEvents"];
  return std::any_of(events.begin(), events.end(),
                     [](const nlohmann::json& e) { return e.value("cat", "") == "summarised"; });
}

// Without --steps, the window is centred on the first edge; reading starts a window's worth of
// steps before it (by the run's calls per step), so a long run is not read from its start.
void startBeforeTheEdge(const store::RunData& whole, const CallRecord& edge, int64_t max_calls, store::CallQuery* q) {
  int64_t steps = 1;
  for (const store::RankInfo& r : whole.ranks) steps = std::max(steps, r.steps + 1);
  const int64_t per_step = std::max<int64_t>(1, whole.total_calls / steps);
  q->first_step = std::max<int64_t>(0, edge.step - max_calls / per_step - 1);
}

int trace(const Options& opts) {
  store::CallQuery query;
  if (!opts.steps.empty()) {
    if (Status st = parseSteps(opts.steps, &query); !st.ok())
      return std::cerr << "nanprov trace: " << printable(st.message()) << "\n", kUsageError;
  }
  if (!opts.ranks.empty()) {
    if (Status st = parseRanks(opts.ranks, &query); !st.ok())
      return std::cerr << "nanprov trace: " << printable(st.message()) << "\n", kUsageError;
  }
  int code = kClean;
  auto dirs = resolveRunDirs("trace", opts.run, &code);
  if (!dirs) return code;
  // The first edge, found through the stores' index at any run size, then the window's calls.
  auto whole = store::loadRun(*dirs, store::RunScope::kEdges);
  if (!whole.ok()) return fail("trace", whole.status());
  const report::Findings found = report::analyze(*whole);
  // Centred on the first edge unless --steps says where, or --ranks leaves its rank out.
  const CallRecord* centre = opts.steps.empty() && found.first && query.wantsRank(whole->calls[*found.first].rank)
                                 ? &whole->calls[*found.first]
                                 : nullptr;
  if (centre) startBeforeTheEdge(*whole, *centre, opts.max_calls, &query);
  bool cut = false;
  auto window = store::loadRunWindow(*dirs, query, opts.max_calls, centre, &cut);
  if (!window.ok()) return fail("trace", window.status());
  report::Findings findings = found;
  findings.first = indexIn(*window, *whole, found.first);
  findings.first_source = indexIn(*window, *whole, found.first_source);
  auto timeline = report::timelineOf(std::move(*window), findings);
  if (!timeline.ok()) return fail("trace", timeline.status());
  const report::Timeline& t = *timeline;
  const nlohmann::json trace = report::perfettoTrace(t);
  // Written aside and renamed: a viewer never opens half a trace.
  Status wrote = store::replaceFile(opts.out, "trace", [&](std::ostream& out) { out << jsonText(trace) << "\n"; });
  if (!wrote.ok()) return fail("trace", wrote);
  std::cout << "wrote " << printable(opts.out) << ": " << t.ranks.size()
            << (t.ranks.size() == 1 ? " rank, " : " ranks, ") << t.calls.size() << " attention calls";
  if (t.first_edge) std::cout << ", first non-finite edge " << callName(t.calls[*t.first_edge].call);
  std::cout << "\n";
  if (cut || t.calls.size() < static_cast<size_t>(whole->total_calls)) {
    std::cout << "  of the run's " << whole->total_calls << " calls, the trace holds "
              << (t.calls.empty() ? "none"
                                  : "steps " + std::to_string(t.calls.front().call.step) + "-" +
                                        std::to_string(t.calls.back().call.step))
              << (found.first && !findings.first
                      ? " (not the first edge's, step " + std::to_string(whole->calls[*found.first].step) + ")"
                      : "")
              << "; choose others with --steps A:B and --ranks, or raise --max-calls\n";
  }
  // Summarised calls have no row, so no slice: said, not left for a gap in the timeline to imply.
  if (std::string summarised = report::summarisedText(whole->summarised()); !summarised.empty()) {
    std::cout << "  no slice for calls the store budget summarised: " << summarised << "\n";
    if (marked(trace))
      std::cout << "  the track \"" << report::kSummarisedTrack << "\" marks those within the trace's steps\n";
  }
  std::cout << "open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing\n";
  return kClean;
}

}  // namespace

void addTraceCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("trace", "Write the run as a timeline that ui.perfetto.dev and chrome://tracing open");
  cmd->footer(
      "The file is Chrome trace-event JSON. Open it at https://ui.perfetto.dev (\"Open trace\n"
      "file\", or drag it onto the page; it stays in the browser) or in chrome://tracing (Load).\n\n"
      "What it shows: a process per rank; in it a \"training thread\" track with the optimizer\n"
      "steps and, inside them, the forward attention calls; an \"autograd\" track with the\n"
      "backward calls; and, where CUPTI traced them, a \"CUDA stream N\" track per stream with\n"
      "the kernels, each joined to its call by an arrow. Each call is named rank:layer:call as in\n"
      "the report; click it for its module, phase, health and non-finite roles. Steps whose calls\n"
      "the store budget summarised have a slice per stretch on a track of their own. The first\n"
      "non-finite edge is a marker across its rank (\"first non-finite edge: ...\"). Times are\n"
      "µs from the run's first event; slices whose stored times overlap are fitted to nest,\n"
      "and keep the stored times in their args.\n\n"
      "A trace holds at most --max-calls calls (default 25,000, about 160 MB while it is written;\n"
      "at most 100,000):\n"
      "by default the steps around the first non-finite edge, else the first steps. --steps and\n"
      "--ranks choose another window; a line says when calls were left out.\n\n"
      "Examples:\n"
      "  nanprov trace --out nan.json                 the newest run, around its first edge\n"
      "  nanprov trace runs/nan-hunt --out nan.json --steps 1200:1210 --ranks 0,3");
  addRunArgument(cmd, &opts->run);
  cmd->add_option("--out", opts->out, "The file to write (JSON)")->required()->type_name("FILE");
  cmd->add_option("--steps", opts->steps, "Only these steps: A:B (both included), A:, :B or one step")
      ->type_name("A:B");
  cmd->add_option("--ranks", opts->ranks, "Only these ranks, a comma list")->type_name("LIST");
  cmd->add_option("--max-calls", opts->max_calls, "At most this many calls (default 25000, at most 100000)")
      ->check(wholeNumber())
      ->check(CLI::Validator(
          [](std::string& s) {
            auto n = parseInteger(s, 1, kMostCalls);
            return n ? std::string()
                     : "'" + s + "' is not a call count from 1 to " + std::to_string(kMostCalls) +
                           " (a trace of more would take more memory than its window is worth; choose the steps "
                           "with --steps A:B)";
          },
          "N", "call count"));
  cmd->callback([opts, exit_code] { *exit_code = trace(*opts); });
}

}  // namespace nanprov::cli
