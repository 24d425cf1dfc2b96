// `nanprov replay CAPTURE|RUN [--backends LIST] [--device cpu|cuda] [--json] [--emit-repro DIR]`:
// checks the arguments and the capture here, then runs the LibTorch replay engine
// (replay/replay_main.cpp), whose output and exit code are replay's own.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "base/json_text.h"
#include "base/text.h"
#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/install_layout.h"
#include "replay/backend_names.h"
#include "replay/engine_request.h"
#include "report/build_report.h"
#include "report/edges.h"
#include "report/run_verdict.h"
#include "store/capture_file.h"
#include "store/run_dir.h"

namespace nanprov::cli {
namespace {
namespace fs = std::filesystem;

struct Options {
  std::vector<std::string> targets;  // one capture file, or run directories (one job's)
  std::string backends;
  std::string device = "auto";
  bool json = false;
  bool audit = false;
  std::string emit_repro;
  bool keep = false;
  int64_t max_memory = 0;  // 0: the engine's default
  int reruns = replay::kDefaultReruns;
  bool backends_given = false;
  std::string python = installLayout().python;
};

// What a run directory gives replay: the capture of its first source edge; when no value went
// non-finite, the capture of the audit's first finding (a finite, silent-wrong call), as
// `nanprov verdict` replays it; else why there is nothing to replay (not an error: the answer is
// elsewhere).
struct RunCapture {
  std::string path;
  std::string nothing;
};

StatusOr<RunCapture> captureOfRun(const store::RunDirs& dirs) {
  NANPROV_ASSIGN_OR_RETURN(auto run, store::loadRun(dirs, store::RunScope::kEdges));
  report::Findings f = report::analyze(run);
  if (!f.first_source) {
    if (!f.first) {
      NANPROV_ASSIGN_OR_RETURN(report::Report report, report::buildReport(run, f));
      if (std::optional<report::ReplayTarget> audited = report::replayTargetOf(report)) {
        if (audited->capture.empty()) return Status::Error(audited->why);
        return RunCapture{.path = audited->capture};
      }
      return RunCapture{.nothing = "no attention call in " + run.dir + " met a non-finite value; see nanprov report"};
    }
    const std::string trail = run.trailOn() ? "nanprov report names the module that made it"
                                            : "run again with nanprov run --trail to name the module that made it";
    return RunCapture{.nothing = "attention received the non-finite values (" + callName(run.calls[*f.first]) +
                                 " took them from upstream) and made none itself: " + trail};
  }
  const CallRecord& edge = run.calls[*f.first_source];
  const CaptureRecord* capture = run.captureOf(edge.rank, edge.seq);
  if (!capture)
    return Status::Error("the first source edge " + callName(edge) +
                         " was not captured (run with nanprov run's defaults)");
  if (capture->path.empty())
    return Status::Error("the first source edge " + callName(edge) + " was not captured: " + capture->skipped);
  return RunCapture{.path = run.capturePath(*capture)};
}

// Comma list of backend names, checked; "reference" is always run and accepted for clarity.
StatusOr<std::string> checkedBackends(const std::string& list, bool given) {
  if (given && list.empty())
    return Status::Error("--backends '' names no backend; leave it out for every backend of the device");
  std::string out;
  size_t begin = 0;
  while (begin <= list.size() && !list.empty()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    std::string name = list.substr(begin, end - begin);
    begin = end + 1;
    if (name.empty())
      return Status::Error("--backends '" + list + "' has an empty name (two commas, or one at an end)");
    if (name == "reference") continue;
    // The package backends rerun through their own Python package, and only for calls that ran them.
    if (!replay::isKnownBackend(name) && !replay::rerunsThroughItsPackage(name)) {
      return Status::Error("unknown backend '" + name + "'; backends are " + joined(replay::knownBackends()) + ", " +
                           joined(replay::packageBackends()));
    }
    out += (out.empty() ? "" : ",") + name;
  }
  return out;
}

int replay(const Options& opts) {
  auto backends = checkedBackends(opts.backends, opts.backends_given);
  if (!backends.ok())
    return std::cerr << "nanprov replay: " << printable(backends.status().message()) << "\n", kUsageError;
  std::string capture = opts.targets.size() == 1 ? opts.targets.front() : "";
  std::error_code ec;
  if (opts.targets.size() > 1 && !fs::is_directory(opts.targets.front(), ec)) {
    return std::cerr << "nanprov replay: give one capture file, or run directories\n", kUsageError;
  }
  if (capture.empty() || fs::is_directory(capture, ec)) {
    int code = kClean;
    auto dirs = resolveRunDirs("replay", opts.targets, &code);
    if (!dirs) return code;
    auto found = captureOfRun(*dirs);
    if (!found.ok()) return fail("replay", found.status());
    if (found->path.empty()) {
      if (opts.json) std::cout << jsonText({{"replayed", false}, {"nothing_to_replay", found->nothing}}, 1) << "\n";
      else std::cout << "nothing to replay: " << printable(found->nothing) << "\n";
      return opts.audit ? kInputError : kClean;  // --audit: 0 would say the outputs were judged ok
    }
    capture = found->path;
  }
  // Checked here too, so a broken file gets its one-line error without starting LibTorch.
  if (Status st = store::checkCapture(capture); !st.ok()) return fail("replay", st);
  std::string engine = installLayout().replay_engine;
  if (access(engine.c_str(), X_OK) != 0) {
    return fail("replay", Status::Error("replay engine missing at " + engine + "; build nanprov (./scripts/test)"));
  }
  using replay::EngineOutput;
  std::vector<std::string> args =
      replay::engineArgv(engine, {.capture = capture,
                                  .device = opts.device,
                                  .backends = *backends,
                                  .output = opts.audit  ? (opts.json ? EngineOutput::kAuditJson : EngineOutput::kAudit)
                                            : opts.json ? EngineOutput::kJson
                                                        : EngineOutput::kText,
                                  .emit_repro = opts.emit_repro,
                                  .keep = opts.keep,
                                  .reruns = opts.reruns});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (opts.max_memory > 0) setenv("NANPROV_REPLAY_MAX_MEMORY", std::to_string(opts.max_memory).c_str(), 1);
  // For a FlashAttention or FFPA call: the Python that reruns it through its package (replay/flash_rerun.h).
  setenv("NANPROV_REPLAY_PYTHON", opts.python.c_str(), 1);
  setenv("NANPROV_BOOTSTRAP_DIR", installLayout().bootstrap_dir.c_str(), 1);
  std::cout.flush();
  execv(engine.c_str(), argv.data());
  return fail("replay", Status::Error("cannot run " + engine + ": " + std::strerror(errno)));
}

}  // namespace

void addReplayCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("replay", "Re-run a captured call through every backend and a float64 reference");
  cmd->footer(
      "Runs the call's forward (and its backward with the captured dO) through each SDPA\n"
      "backend that accepts it, and through nanprov's float64 reference attention, then\n"
      "judges every output: ok, suspect, non-finite, all-zero, silent-wrong, unsupported or\n"
      "reference-invalid (rules in the README). The root cause is one of none,\n"
      "backend-specific, forward-ok-backward-wrong, input-caused, precision-limit,\n"
      "fully-masked-rows, captured-backend-suspect, cannot-judge, not-reproduced,\n"
      "reference-suspect, or nondeterministic.\n"
      "The captured backend runs the call --reruns times (default 5), on this device and on\n"
      "every other GPU here of the same model, each result compared bit for bit: the run's\n"
      "result recurs every time (a deterministic fault), k of N times (nondeterministic: the\n"
      "other backends are rerun too, to say whether the call or the kernel is unstable), or\n"
      "never while every rerun gives the same bits (not-reproduced: the run's result cannot be\n"
      "recomputed from its inputs here; suspect the device or the run's context).\n"
      "A FlashAttention 2/3/4 or FFPA call is also rerun through its own package, in --python,\n"
      "where it imports (FlashAttention 4 needs a Hopper or Blackwell GPU, FFPA a CUDA GPU);\n"
      "where it cannot be rerun, the root cause is captured-backend-suspect when every other\n"
      "backend gets the call right.\n"
      "Exit code: 0 no fault recurred (none, not-reproduced, cannot-judge), 1 a fault recurred\n"
      "(nondeterministic too),\n"
      "2 usage error, 3 unreadable capture.\n\n"
      "Examples:\n"
      "  nanprov replay                        the newest run's first source edge\n"
      "  nanprov replay nanprov-runs/<run>/captures/rank0-layer1-call1-bwd-seq5.safetensors\n"
      "  nanprov replay CAPTURE --backends efficient,math --device cuda --json\n"
      "  nanprov replay CAPTURE --emit-repro bug/   writes bug/repro.py for an upstream report\n"
      "  nanprov replay CAPTURE --keep         also keeps X.replay.json beside X.safetensors for report --html\n"
      "  nanprov replay CAPTURE --audit        judge only the run's own outputs, as --audit does\n\n"
      "With --audit: exit 0 the run's outputs are ok, 1 a finding, 3 not auditable (why is printed);\n"
      "the judgement is kept next to the capture (CAPTURE.audit.json) for nanprov report.");
  cmd->add_option("capture", opts->targets,
                  "A capture file, or a run directory for its first source edge's capture, or where no value went "
                  "non-finite its audit's first finding's (default: the newest run); "
                  "several directories of one multi-node job are read as one run")
      ->expected(0, -1);
  cmd->add_option("--backends", opts->backends,
                  "Comma list from cudnn, flash, efficient, math (CUDA), flash_cpu, math (CPU), plain_softmax "
                  "(either: softmax(q kᵀ + mask) v with no guard for fully masked rows, as nn.MultiheadAttention "
                  "and HF eager compute it), fa2, fa3, fa4, ffpa (a FlashAttention or FFPA call, rerun through its "
                  "package); default: every backend of the device, plus the call's own backend when it is one of the "
                  "last five");
  cmd->add_option(
      "--python", opts->python,
      "The Python that reruns a FlashAttention or FFPA call through its package (default: the one nanprov was "
      "built against, " +
          installLayout().python + ")");
  cmd->add_option("--device", opts->device,
                  "auto, cpu or cuda (default auto: where the call was captured, if present here, else the CPU)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  addJsonFlag(cmd, &opts->json);
  CLI::Option* audit = cmd->add_flag("--audit", opts->audit,
                                     "Judge only the outputs the run produced against the float64 reference "
                                     "(what nanprov run --audit does with its audit captures); no other backend runs");
  cmd->add_option("--emit-repro", opts->emit_repro,
                  "Also write DIR/repro.py and DIR/inputs.safetensors: a standalone script that shows "
                  "the failure with plain PyTorch")
      ->type_name("DIR")
      ->excludes(audit);
  cmd->add_flag("--keep", opts->keep,
                "Also keep the verdicts next to the capture, as X.replay.json for X.safetensors, where "
                "nanprov report --html shows them")
      ->excludes(audit);
  cmd->add_option("--reruns", opts->reruns,
                  "How often the captured backend runs the call in all, each result compared bit for bit with the "
                  "others and with the run's (default " +
                      std::to_string(replay::kDefaultReruns) + "; 1 runs it once)")
      ->check(CLI::Range(1, replay::kMaxReruns))
      ->excludes(audit);
  cmd->add_option("--max-memory", opts->max_memory,
                  "Refuse, before running, a call whose replay on the CPU would need more memory than this "
                  "(estimated from its shapes; default three quarters of the memory available; suffixes K M G)")
      ->transform(sizeValue())
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 50));
  cmd->callback([opts, exit_code, cmd] {
    opts->backends_given = cmd->count("--backends") > 0;
    *exit_code = replay(*opts);
  });
}

}  // namespace nanprov::cli
