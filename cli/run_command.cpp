// `nanprov run [options] -- CMD...`: runs a training command with the probes loaded into every
// Python process it starts, then prints the first-failure summary.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/child_process.h"
#include "base/json_text.h"
#include "base/text.h"
#include "cli/auditor.h"
#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/install_layout.h"
#include "cli/python_torch.h"
#include "cli/slurm_task.h"
#include "probes/core/call_selector.h"
#include "probes/core/capture_policy.h"
#include "probes/core/injection.h"
#include "replay/backend_names.h"
#include "replay/engine_request.h"
#include "report/build_report.h"
#include "report/call_kernels.h"
#include "report/edges.h"
#include "report/report_text.h"
#include "store/process_notes.h"
#include "store/reader.h"
#include "store/run_dir.h"
#include "store/run_file.h"
#include "store/task_run_files.h"
#include "store/writer.h"

namespace nanprov::cli {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// How long a Slurm task whose training ended waits for the other tasks of its directory, so that its
// report covers their ranks: a job's tasks end within seconds of each other, a hung one must not
// hold the step for long.
constexpr std::chrono::seconds kOtherTasksWait{60};

// Beyond any real count of calls or bytes; a larger value is a typo, not a setting.
constexpr int64_t kMaxCount = int64_t{1} << 50;
// The smallest --store-budget: the empty schema takes about 80K, and the WAL and ring need room.
constexpr int64_t kSmallestStoreBudget = int64_t{256} << 10;

struct RunOptions {
  std::string out;
  std::vector<std::string> inject;
  int trace_steps = 2;
  bool no_kernels = false;
  std::vector<std::string> capture;
  std::vector<std::string> probe_modules;
  std::vector<std::string> probe_ops;
  int64_t capture_every = 0;
  int64_t capture_bytes = probes::kDefaultCaptureBytes;
  int64_t store_budget = store::kDefaultStoreBudgetBytes;
  bool no_capture = false;
  int64_t reruns = probes::kDefaultEdgeReruns;
  bool reruns_given = false;
  bool audit = false;
  int64_t audit_every = 0;
  double audit_budget = probes::kDefaultAuditPercent;
  int64_t audit_bytes = probes::kDefaultAuditBytes;
  int64_t audit_slice_bytes = probes::kDefaultAuditSliceBytes;
  bool warn_only = false;
  bool trail = false;
  bool out_given = false;
  std::vector<std::string> command;
};

// Before anything starts: can that Python import torch? A torch nanprov was not built for (a later
// `pip install torch==OTHER` in the environment) gets the training run as it is, uninstrumented:
// one line says so and names the rebuild, and this process becomes the training.
Status preflight(const std::string& python, const std::vector<std::string>& command) {
  NANPROV_ASSIGN_OR_RETURN(auto info, torchInfo(python));
  Status match = checkTorchMatchesBuild(python, info);
  if (match.ok()) return match;
  std::cerr << "nanprov run: " << printable(match.message()) << "; the training runs uninstrumented\n";
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  return Status::Error("cannot run " + command.front() + ": " + std::strerror(errno));
}

// An edge that ran after the kernel-tracing window has no kernels of its own, yet naming its
// kernel is half the answer. Its capture holds the call, so replaying the captured backend alone
// on this GPU names them; the report then reads them from CAPTURE.kernels.json (kernels_from
// "replay"). Costs one backend call per edge; --no-kernels skips it.
void traceKernelsOfLateEdges(const store::RunData& run, const report::Findings& f) {
  std::string engine = installLayout().replay_engine;
  if (access(engine.c_str(), X_OK) != 0) return;
  report::CallKernelIndex index(run);
  std::vector<size_t> edges;
  for (std::optional<size_t> e : {f.first, f.first_source}) {
    if (e && std::find(edges.begin(), edges.end(), *e) == edges.end()) edges.push_back(*e);
  }
  for (size_t e : edges) {
    const CallRecord& c = run.calls[e];
    std::string from = index.of(c).from;
    const CaptureRecord* capture = run.captureOf(c.rank, c.seq);
    if (c.device.isCpu() || from == "run" || from == "replay" || !capture || capture->path.empty()) continue;
    // FlashAttention and module probes run code replay cannot rerun: the report infers their
    // kernels from traced calls of the same layer, op and shapes, and says so.
    if (!replay::isKnownBackend(c.backend)) continue;
    int code = 0;
    auto said = captureOutput(
        replay::engineArgv(
            engine, {.capture = run.capturePath(*capture), .device = "cuda", .output = replay::EngineOutput::kKernels}),
        {}, &code);
    if (!said.ok())
      std::cerr << "nanprov: could not replay " << callName(c)
                << " for its kernels: " << printable(said.status().message()) << "\n";
  }
}

// A Python identifier or schema argument name: "query", "_q1".
bool isIdentifier(const std::string& s) {
  return !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
         std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// `PATTERN[:q=ARG,k=ARG,v=ARG]` (probes/bootstrap/nanprov_boot/module_probes.py reads it): checked
// here, so a typo is a usage error before the training starts, not a silent no-op after.
Status checkProbeModule(const std::string& spec) {
  auto bad = [&](const std::string& why) {
    return Status::Error("bad --probe-module '" + spec + "': " + why + " (example: 'SelfAttention:q=0,k=1,v=2')");
  };
  if (spec == "te") return Status::Ok();  // a preset (module_probes.py PRESETS)
  std::string pattern = spec.substr(0, spec.find(':'));
  if (pattern.empty()) return bad("no class name or module path pattern");
  if (spec.find(';') != std::string::npos) return bad("';' is not allowed; repeat --probe-module instead");
  if (pattern.size() == spec.size()) return Status::Ok();
  auto pairs = probes::splitKeyValues(spec.substr(pattern.size() + 1));
  if (!pairs.ok()) return bad(pairs.status().message());
  for (const auto& [key, value] : *pairs) {
    if (key != "q" && key != "k" && key != "v") return bad("unknown key '" + key + "'; keys are q, k, v");
    bool position = !value.empty() && value.size() <= 6 && std::all_of(value.begin(), value.end(), ::isdigit);
    if (!position && !isIdentifier(value))
      return bad(key + "=" + value + " is neither an argument position nor a name");
  }
  return Status::Ok();
}

// The preset of FFPA's op before FFPA was probed by default (probes/bootstrap/nanprov_boot/
// ffpa_probes.py): accepted, and said to add nothing. FFPA 0.2.4 has no ffpa_attn::attn, and its own
// ops are no probe-op target: the backward op gets copies of the forward's tensors (no link by O),
// the forward's LSE has unwritten padding rows, its scalars are softmax_scale and an int causal.
constexpr const char* kRetiredFfpaPreset = "ffpa";

// `NAMESPACE::OP[:q=ARG,k=ARG,v=ARG,o=ARG]` (probes/bootstrap/nanprov_boot/op_probes.py).
Status checkProbeOp(const std::string& spec) {
  auto bad = [&](const std::string& why) {
    return Status::Error("bad --probe-op '" + spec + "': " + why + " (example: 'mylib::attn:q=Q,k=K,v=V')");
  };
  if (spec == kRetiredFfpaPreset) return Status::Ok();
  size_t sep = spec.find("::");
  if (sep == std::string::npos || sep == 0) return bad("not NAMESPACE::OP");
  if (spec.find(';') != std::string::npos) return bad("';' is not allowed; repeat --probe-op instead");
  size_t colon = spec.find(':', sep + 2);
  if (colon == sep + 2 || spec.size() == sep + 2) return bad("no operator name after '::'");
  if (colon == std::string::npos) return Status::Ok();
  auto pairs = probes::splitKeyValues(spec.substr(colon + 1));
  if (!pairs.ok()) return bad(pairs.status().message());
  for (const auto& [key, value] : *pairs) {
    if (key != "q" && key != "k" && key != "v" && key != "o")
      return bad("unknown key '" + key + "'; keys are q, k, v, o");
    if (!isIdentifier(value)) return bad(key + "=" + value + " is not a schema argument name");
  }
  return Status::Ok();
}

// Claims `dir` for this run by creating its run.json exclusively (O_EXCL): of two runs started
// into one directory, even in the same second, exactly one gets it. The other would merge its
// rows into the first run's stores.
Status claimRunDir(const std::string& dir) {
  std::string taken = dir + " already holds a run; pick a new --out (or remove the directory)";
  // A tally or a worker-call counter alone is a run's too (a rank that died before its store): a
  // new run would count on from it.
  if (store::holdsRankStores(dir) || !store::callTallyPaths(dir).empty() || !store::workerCallPaths(dir).empty() ||
      !store::taskRunFilePaths(dir).empty()) {
    return Status::Error(taken);
  }
  NANPROV_ASSIGN_OR_RETURN(auto claimed, store::claimRunFile(dir));
  return claimed ? Status::Ok() : Status::Error(taken);
}

// Why nothing was recorded, from the per-process notes the bootstrap leaves.
std::string processNotes(const std::string& dir) {
  store::ProcessNotes notes = store::readProcessNotes(dir);
  std::string out = "  " + std::to_string(notes.instrumented) + " process(es) instrumented\n";
  for (const std::string& problem : notes.problems) out += "  " + problem + "\n";
  return out;
}

struct SpecList {
  const std::vector<std::string>* specs;
  std::string* joined;
  Status (*check)(const std::string&);
};

int run(RunOptions& opts) {
  std::vector<std::string>& cmd = opts.command;
  if (cmd.empty()) {
    std::cerr << "nanprov run: no command given; usage: nanprov run [options] -- python train.py\n";
    return kUsageError;
  }
  if (opts.out_given && opts.out.empty()) {
    std::cerr << "nanprov run: --out '' names no directory; leave --out out for ./nanprov-runs/<UTC time>\n";
    return kUsageError;
  }
  // Each repeatable option is checked here, so a typo is a usage error before training starts,
  // and handed to the probes as one ';'-joined environment variable.
  std::string inject, capture, probe_modules, probe_ops;
  for (auto [specs, joined, check] :
       {SpecList{&opts.inject, &inject, [](const std::string& s) { return probes::parseInjection(s).status(); }},
        SpecList{&opts.capture, &capture,
                 [](const std::string& s) { return probes::parseCaptureSelector(s).status(); }},
        SpecList{&opts.probe_modules, &probe_modules, &checkProbeModule},
        SpecList{&opts.probe_ops, &probe_ops, &checkProbeOp}}) {
    for (const std::string& spec : *specs) {
      if (Status st = check(spec); !st.ok())
        return std::cerr << "nanprov run: " << printable(st.message()) << "\n", kUsageError;
      if (specs == &opts.probe_ops && spec == kRetiredFfpaPreset) {
        std::cerr << "nanprov run: FFPA is checked by default (ffpa_attn_func, forward and backward); "
                     "--probe-op ffpa adds nothing\n";
        continue;
      }
      *joined += (joined->empty() ? "" : ";") + spec;
    }
  }
  std::string resolved = findExecutable(cmd.front());
  if (resolved.empty()) {  // before the run directory exists: a failed start leaves nothing behind
    std::cerr << "nanprov run: " << printable(whyNotExecutable(cmd.front())) << "\n";
    std::error_code exists_ec;
    bool exists = fs::exists(cmd.front(), exists_ec);
    return exists ? 126 : 127;  // as a shell answers: found but not runnable, or not found
  }
  if (!fs::exists(probesLibrary())) {
    return fail(
        "run", Status::Error("probe library missing at " + probesLibrary() + "; build nanprov first (./scripts/test)"));
  }
  const std::string python = pythonOf(resolved);
  if (!python.empty()) {
    if (Status st = preflight(python, cmd); !st.ok()) return fail("run", st);
  }

  std::string dir = opts.out.empty() ? store::newRunDirName(store::kDefaultRunsRoot) : opts.out;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail("run", Status::Error("cannot create run directory " + dir + ": " + ec.message()));
  std::string abs_dir = fs::absolute(dir).string();
  json doc = {{"command", cmd},
              {"cwd", fs::current_path().string()},
              {"started_ns",
               std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()},
              {"nanprov_version", build::kVersion},
              {"built_torch", build::kTorchVersion},
              {"inject", opts.inject},
              {"capture",
               {{"first_source_edge", !opts.no_capture},
                {"selectors", opts.capture},
                {"every", opts.capture_every},
                {"budget_bytes", opts.capture_bytes}}},
              {"probe_modules", opts.probe_modules},
              {"probe_ops", opts.probe_ops},
              {"trace_steps", opts.trace_steps},
              {"store_budget_bytes", opts.store_budget},
              {"trail", opts.trail},
              {"kernels", !opts.no_kernels},
              {"audit",
               {{"on", opts.audit},
                {"every_steps", opts.audit_every},
                {"budget_percent", opts.audit_budget},
                {"budget_bytes", opts.audit_bytes},
                {"slice_bytes", opts.audit_slice_bytes},
                {"warn_only", opts.warn_only}}}};
  // Started by srun, this is one task of several recording into `dir`: it joins with a run file of
  // its own (cli/slurm_task.h); otherwise it claims the directory alone.
  const std::optional<SlurmTask> slurm = slurmTaskOfThisProcess();
  if (slurm) doc["slurm"] = slurm->json();
  else if (std::string job = slurmJobOfThisProcess(); !job.empty()) doc["slurm"] = {{"job", job}};
  if (Status st = slurm ? joinRunDir(dir, *slurm, doc) : claimRunDir(dir); !st.ok()) {
    std::cerr << "nanprov run: " << printable(st.message()) << "\n";
    return kUsageError;
  }
  // The training runs whatever nanprov can write: it is said, not refused (a full disk).
  if (Status st = slurm ? Status::Ok() : store::writeRunFile(dir, doc); !st.ok()) {
    std::cerr << "nanprov: " << printable(st.message())
              << ": the training runs, but nanprov may record none of it; free space "
              << "on that disk or pick another --out\n";
  }

  std::map<std::string, std::string> env = {
      {"PYTHONPATH", bootstrapPythonPath()},
      {"NANPROV_RUN_DIR", abs_dir},
      {"NANPROV_PROBES_LIB", probesLibrary()},
      {"NANPROV_BUILT_TORCH", build::kTorchVersion},
      {"NANPROV_BUILT_ABI", build::kCxx11Abi},
      {"NANPROV_REBUILD", installLayout().rebuildCommand(python.empty() ? "python3" : python)},
      {"NANPROV_INJECT", inject},
      {"NANPROV_TRACE_STEPS", std::to_string(opts.trace_steps)},
      {"NANPROV_CAPTURE", capture},
      {"NANPROV_CAPTURE_EVERY", std::to_string(opts.capture_every)},
      {"NANPROV_CAPTURE_BYTES", std::to_string(opts.capture_bytes)},
      {"NANPROV_STORE_BUDGET", std::to_string(opts.store_budget)},
      {"NANPROV_CAPTURE_FIRST_EDGE", opts.no_capture ? "0" : "1"},
      {"NANPROV_RERUNS", std::to_string(opts.reruns)},
      // Given on the command line, it reruns a --probe-op's own code too (call_rerun.h).
      {"NANPROV_RERUN_USER_OPS", opts.reruns_given ? "1" : "0"},
      {"NANPROV_PROBE_MODULES", probe_modules},
      {"NANPROV_PROBE_OPS", probe_ops},
      {"NANPROV_AUDIT", opts.audit ? "1" : "0"},
      {"NANPROV_TRAIL", opts.trail ? "1" : "0"},
      {"NANPROV_AUDIT_EVERY", std::to_string(opts.audit_every)},
      {"NANPROV_AUDIT_BUDGET_CENTIPERCENT", std::to_string(std::llround(opts.audit_budget * 100))},
      {"NANPROV_AUDIT_BYTES", std::to_string(opts.audit_bytes)},
      {"NANPROV_AUDIT_SLICE_BYTES", std::to_string(opts.audit_slice_bytes)},
  };
  if (opts.no_kernels) env["NANPROV_KERNELS"] = "off";
  std::cerr << "nanprov: recording into " << printable(dir) << (opts.audit ? ", auditing every layer" : "") << "\n";
  Auditor auditor(abs_dir);
  if (opts.audit) auditor.start();
  auto exit = runChild(cmd, env);
  if (!exit.ok()) return fail("run", exit.status());
  if (opts.audit) auditor.finish();

  doc["exit_code"] = exit->signal ? json(nullptr) : json(exit->exit_code);
  doc["signal"] = exit->signal ? json(strsignal(exit->signal)) : json(nullptr);
  if (Status st = slurm ? store::writeTaskRunFile(dir, slurm->task, doc) : store::writeRunFile(dir, doc); !st.ok()) {
    std::cerr << "nanprov: " << printable(st.message()) << "\n";
  }
  const TaskEnding ending = slurm ? endTask(dir, *slurm, kOtherTasksWait) : TaskEnding{};

  std::cerr << "\n" << ending.preface;
  if (exit->signal) {
    std::cerr << "nanprov: the training process was killed by " << strsignal(exit->signal)
              << "; what it flushed is reported below\n";
  } else if (exit->exit_code != 0) {
    std::cerr << "nanprov: the training process exited with code " << exit->exit_code
              << "; what it recorded is reported below\n";
  }
  auto data = store::loadRun(dir, store::RunScope::kEdges);
  if (!data.ok()) {
    std::cerr << "nanprov: nothing to report: " << printable(data.status().message()) << "\n" << processNotes(dir);
  } else {
    report::Findings findings = report::analyze(*data);
    // Once per directory: the other tasks of a Slurm step would replay the same edges again.
    if (!opts.no_kernels && ending.prints_report) traceKernelsOfLateEdges(*data, findings);
    auto built = report::buildReport(*data, std::move(findings));
    if (!built.ok())
      return std::cerr << "nanprov: " << printable(built.status().message()) << "\n", exit->passThroughCode();
    const report::Report& report = *built;
    const std::string text = report::reportText(report);
    std::cerr << (ending.prints_report ? text : text.substr(0, text.find('\n') + 1)) << "  details: nanprov report "
              << printable(dir) << "\n";
    // A training that ended well still fails the run on what nanprov found (unless warn-only):
    // real training loops keep going on a NaN loss and exit 0, and a CI job must not stay green.
    if (exit->passThroughCode() == 0 && !opts.warn_only) {
      int found = reportExitCode(report.conclusion);
      if (found == kEdgeFound || found == kAuditFound || found == kReplicaDiverged) return found;
    }
  }
  return exit->passThroughCode();
}

// A byte count with K, M, G suffixes, at most kMaxCount.
CLI::Option* addSizeOption(CLI::App* cmd, const std::string& name, int64_t& value, const std::string& help) {
  return cmd->add_option(name, value, help)->transform(sizeValue())->check(CLI::Range(int64_t{0}, kMaxCount));
}

// An option given once per value (--inject A --inject B), each value whole: a selector's commas
// are its own, not a list of values.
CLI::Option* addRepeatableOption(CLI::App* cmd, const std::string& name, std::vector<std::string>& values,
                                 const std::string& help) {
  return cmd->add_option(name, values, help + " Repeatable.")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

}  // namespace

void addRunCommand(CLI::App& app, int* exit_code, std::vector<std::string> wrapped) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run",
                                     "Run a training command with nanprov's probes in every Python process:\n"
                                     "  nanprov run [OPTIONS] -- CMD [ARGS...]");
  cmd->footer(
      "Examples:\n"
      "  nanprov run -- python train.py --lr 3e-4\n"
      "  nanprov run --out runs/nan-hunt -- torchrun --nproc-per-node=2 train.py\n"
      "  nanprov run --inject 'layer=3,phase=bwd,tensor=dQ,step=5,value=nan' -- python train.py\n"
      "  nanprov run --trace-steps 0 -- python train.py     attribute every call's kernels\n"
      "  nanprov run --capture 'layer=1,phase=bwd,step=0' -- python train.py\n"
      "  nanprov run --probe-module 'CausalSelfAttention' -- python train.py   hand-written attention\n"
      "  nanprov run --probe-op 'mylib::attn:q=Q,k=K,v=V' -- python train.py   a library's own op\n"
      "  nanprov run --audit -- python train.py          also catch finite but wrong outputs\n"
      "  nanprov run --trail -- python train.py          name the module that made a NaN outside attention\n\n"
      "Writes a run directory (default ./nanprov-runs/<UTC time>) with run.json and one\n"
      "rank-<r>.sqlite per rank, prints the first-failure summary when the command ends,\n"
      "and exits with the command's exit code (128+N when a signal N killed it). When the\n"
      "command exits 0 but nanprov found a fault, the exit code says so, so a CI job that wraps\n"
      "training fails: 1 a non-finite edge or non-finite gradients (also when what made them was\n"
      "not checked: outcome unattributed), 5 --audit found finite but wrong outputs; a run that is\n"
      "only partial (nothing went non-finite, not everything was checked) exits 0. --warn-only\n"
      "keeps the command's own code.\n"
      "The first source edge of each rank is captured into <run>/captures/ for nanprov replay.");
  cmd->add_option("--out", opts->out, "Run directory to write (default: ./nanprov-runs/<UTC timestamp>)");
  addRepeatableOption(cmd, "--inject", opts->inject,
                      "Corrupt one output of matching calls after the kernel, to test the setup: "
                      "keys tensor (O LSE dQ dK dV), value (nan inf -inf zero scale:F), rank, layer, step, from-step, "
                      "call, phase.");
  cmd->add_option("--trace-steps", opts->trace_steps,
                  "Attribute CUDA kernels with CUPTI during the first N optimizer steps (default 2), "
                  "then stop tracing: later calls show the kernels of the same layer, op and shapes "
                  "from a traced step. 0 traces every step (exact, slower on launch-bound runs)")
      ->check(wholeNumber())
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--no-kernels", opts->no_kernels,
                "Do not attribute kernels at all (no CUPTI): checks only, the cheapest setting");
  addRepeatableOption(cmd, "--capture", opts->capture,
                      "Also capture every call matching this selector (keys rank, layer, step, from-step, call, "
                      "phase), for nanprov replay.");
  cmd->add_option("--capture-every", opts->capture_every,
                  "Also capture every Nth attention call of each rank, for nanprov replay (default 0: off)")
      ->check(wholeNumber())
      ->check(CLI::Range(int64_t{0}, kMaxCount));
  addSizeOption(cmd, "--capture-bytes", opts->capture_bytes,
                "Tensor bytes each rank may capture in all (default 1GiB; suffixes K M G); calls "
                "beyond are recorded as skipped");
  addSizeOption(cmd, "--store-budget", opts->store_budget,
                "Bytes each rank's store may take (default 1GiB; suffixes K M G; at least 256K), for any run length: "
                "calls that are not clean, the first and last steps and the steps around each edge stay in full, "
                "the other steps' clean calls become per-step summaries")
      ->check(CLI::Range(kSmallestStoreBudget, kMaxCount));
  addRepeatableOption(cmd, "--probe-module", opts->probe_modules,
                      "Also check attention that runs as no op nanprov wraps (hand-written softmax(QK^T)V, a "
                      "library's module), at the boundary of modules matching PATTERN[:q=ARG,k=ARG,v=ARG]: a "
                      "class-name glob, or a module-path glob when it holds a '.'; ARG is a forward argument "
                      "by position or name (default q=0,k=1,v=2). Preset: 'te' (TransformerEngine "
                      "DotProductAttention). Forward and, in training, backward (tensor hooks).");
  addRepeatableOption(cmd, "--probe-op", opts->probe_ops,
                      "Also check a library's own attention op in PyTorch's dispatcher, "
                      "NAMESPACE::OP[:q=ARG,k=ARG,v=ARG,o=ARG] "
                      "(ARG: a schema argument name; default query, key, value; O is the argument mapped to o, else "
                      "the op's first result). Probed like the SDPA ops, kernels named; forward only. FlashAttention "
                      "2/3/4 and FFPA need none: they are checked by default.");
  cmd->add_flag("--no-capture", opts->no_capture,
                "Do not capture the first source edge (selectors and --capture-every still apply)");
  cmd->add_option("--reruns", opts->reruns,
                  "When it captures the first source edge, the process that ran it runs the call again this many "
                  "times, right there (same op, inputs and device), and the capture says how often the run's result "
                  "recurred, for nanprov replay's verdict: every time, some of the times (a nondeterministic kernel) "
                  "or never (suspect the device or the run's context); 0: not rerun (default " +
                      std::to_string(probes::kDefaultEdgeReruns) +
                      "). A --probe-op, "
                      "the library's own code, is rerun only when this is given")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  CLI::Option* audit =
      cmd->add_flag("--audit", opts->audit,
                    "Also catch outputs that are finite but wrong (an all-zero O, scaled gradients): judge what "
                    "the run computed against the float64 reference while the training runs. Every (call "
                    "signature, layer, phase) is judged at its first call; then, step after step, the layer judged "
                    "least recently, within --audit-budget. Findings are printed, listed by nanprov report with "
                    "the coverage (which layers were judged, when last), and make the run exit 5");
  cmd->add_option("--audit-every", opts->audit_every,
                  "With --audit, judge every call of every N-th optimizer step instead of rotating: a complete "
                  "audit, for debugging (default 0: the rotation)")
      ->check(wholeNumber())
      ->check(CLI::Range(int64_t{0}, kMaxCount))
      ->needs(audit);
  cmd->add_option("--audit-budget", opts->audit_budget,
                  "With --audit, the share of the run's time the rotation may take, in percent: the training "
                  "thread copying calls out plus the judge judging them (default 1; 100: one layer every step, "
                  "whatever it costs). The first pass and calls judged again for their conditions are neither limited "
                  "nor charged to it")
      ->check(percentText())
      ->check(CLI::Range(0.01, 100.0))
      ->needs(audit);
  addSizeOption(cmd, "--audit-max-bytes", opts->audit_bytes,
                "Tensor bytes of each rank's audit captures that may wait for the judge at once (default 256M; "
                "suffixes K M G); calls beyond are reported as not audited, and tried again later")
      ->needs(audit);
  addSizeOption(cmd, "--audit-slice-bytes", opts->audit_slice_bytes,
                "A call whose tensors are bigger is audited on a slice: the first and last batch x the first "
                "and last KV head group, every row (default 16M)")
      ->needs(audit);
  cmd->add_flag("--trail", opts->trail,
                "Also check every module's output and, in training, the gradient its backward sends to its "
                "inputs, so that when the first non-finite value was made outside attention the report names "
                "the first module that made it (forward or backward), its step and phase. Asynchronous like the "
                "attention checks. Inside torch.compile'd code a module's forward is checked where Inductor writes its "
                "values to memory anyway (the report names the modules that ran unchecked before it), its "
                "backward not at all");
  cmd->add_flag("--warn-only,--audit-warn-only", opts->warn_only,
                "Print and record what nanprov finds, but exit with the training's own code");
  // Without "--", everything from the first positional on is the user's command.
  cmd->prefix_command();
  cmd->callback([opts, exit_code, cmd, wrapped] {
    opts->reruns_given = cmd->count("--reruns") > 0;
    opts->command = cmd->remaining();
    // Before "--", a leading dash is a mistyped nanprov option, not a program to run.
    if (!opts->command.empty() && opts->command.front().rfind("-", 0) == 0) {
      std::cerr << "nanprov run: unknown option " << opts->command.front()
                << "; see nanprov run --help, and put the training command after --\n";
      *exit_code = kUsageError;
      return;
    }
    opts->command.insert(opts->command.end(), wrapped.begin(), wrapped.end());
    opts->out_given = cmd->count("--out") > 0;
    *exit_code = run(*opts);
  });
}

}  // namespace nanprov::cli
