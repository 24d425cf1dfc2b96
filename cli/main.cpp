// nanprov: finds the attention call that first turned finite inputs into non-finite outputs.
#include <iostream>

#include "base/text.h"
#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/commit.h"
#include "cli/help_format.h"
#include "store/job.h"
#include "store/run_dir.h"

namespace nanprov::cli {

int fail(const std::string& command, const Status& status) {
  // Escaped: a message names files and values from outside (a rank file named with a newline
  // must not print a second line).
  std::cerr << "nanprov " << command << ": " << nanprov::printable(status.message()) << "\n";
  return nanprov::kInputError;
}

std::optional<store::RunDirs> resolveRunDirs(const std::string& command, const std::vector<std::string>& given,
                                             int* exit_code) {
  std::vector<std::string> dirs;
  for (const std::string& one : given.empty() ? std::vector<std::string>{""} : given) {
    auto dir = store::resolveRunDir(one);
    if (!dir.ok()) return *exit_code = fail(command, dir.status()), std::nullopt;
    dirs.push_back(*dir);
  }
  store::RunDirs run(std::move(dirs));
  if (run.all.size() > 1) {
    if (Status one_job = store::checkOneJob(run); !one_job.ok()) {
      fail(command, one_job);
      return *exit_code = nanprov::kNotOneJob, std::nullopt;
    }
  }
  return run;
}

std::optional<store::RunData> openRun(const std::string& command, const std::vector<std::string>& given, int* exit_code,
                                      store::RunScope scope) {
  auto dirs = resolveRunDirs(command, given, exit_code);
  if (!dirs) return std::nullopt;
  auto run = store::loadRun(*dirs, scope);
  if (!run.ok()) return *exit_code = fail(command, run.status()), std::nullopt;
  return std::move(*run);
}

}  // namespace nanprov::cli

int main(int argc, char** argv) {
  using namespace nanprov::cli;
  CLI::App app{
      "nanprov: which attention call first turned finite inputs into non-finite outputs,\n"
      "which kernel ran it, and whether that kernel is at fault.\n\n"
      "  nanprov run -- python train.py      wrap a training run (torchrun works too)\n"
      "  nanprov report                      first non-finite edge of the newest run\n"
      "  nanprov runs                        the runs so far, newest first, with their outcome\n"
      "  nanprov calls --nonfinite           the calls that touched NaN/Inf\n"
      "  nanprov kernels --call rank0:layer1:call1   the kernels that ran a call\n"
      "  nanprov replay                      is the first edge's kernel at fault? (float64 check)\n"
      "  nanprov verdict                     kernel, device, or data? one exit code for the scheduler\n"
      "  nanprov trace --out nan.json        the run as a timeline for ui.perfetto.dev\n"
      "  nanprov sql \"SELECT ...\"            read-only SQL over the run's stores\n"
      "  nanprov doctor                      check torch, ABI and the probes\n",
      "nanprov"};
  // What a bug report needs to say which nanprov ran: the version and commit, and what it was
  // built against (the probes refuse a training process whose torch differs). CUDA is torch's:
  // a CPU build (2.13.0+cpu) runs no CUDA whatever toolkit compiled nanprov's own kernels, which
  // is named as such.
  namespace build = nanprov::build;
  const std::string torch_cuda = std::string(build::kTorchCuda) == "none" ? ", a CPU build: no CUDA runtime"
                                                                          : std::string(", CUDA ") + build::kTorchCuda;
  app.set_version_flag("--version", std::string("nanprov ") + build::kVersion + " (commit " + build::kCommit + ")\n" +
                                        "built against torch " + build::kTorchVersion + " (C++11 ABI " +
                                        build::kCxx11Abi + ")" + torch_cuda + "\nbuilt with CUDA toolkit " +
                                        build::kCudaVersion + ", cuDNN " + build::kCudnnVersion + ", CUPTI " +
                                        build::kCuptiVersion);
  app.formatter(std::make_shared<HelpFormat>());  // subcommands take it from here
  app.require_subcommand(1);
  int exit_code = 0;
  // Everything after the first "--" is the command `nanprov run` wraps; CLI11 never sees it.
  std::vector<std::string> wrapped;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      wrapped.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  addRunCommand(app, &exit_code, wrapped);
  addReportCommand(app, &exit_code);
  addRunsCommand(app, &exit_code);
  addCallsCommand(app, &exit_code);
  addKernelsCommand(app, &exit_code);
  addReplayCommand(app, &exit_code);
  addSqlCommand(app, &exit_code);
  addDoctorCommand(app, &exit_code);
  addKnownIssuesCommand(app, &exit_code);
  addTraceCommand(app, &exit_code);
  addVerdictCommand(app, &exit_code);
  const std::vector<CLI::App*> commands = app.get_subcommands([](CLI::App*) { return true; });
  for (CLI::App* sub : commands) {
    for (CLI::Option* opt : sub->get_options()) {
      // A flag given twice (`report --json --json`) is a typo, not a count.
      if (opt->get_items_expected_max() == 0 && opt->get_name() != "--help")
        opt->multi_option_policy(CLI::MultiOptionPolicy::Throw);
      // Help for people: "--capture-bytes SIZE", not CLI11's "INT:SIZE [b, kb(=1024b), ...]:INT in
      // [0 - 1125899906842624]"; the option's own text says the range and the units.
      for (int i = 0;; ++i) {
        try {
          opt->get_validator(i)->description("");
        } catch (const CLI::OptionNotFound&) {
          break;
        }
      }
      const std::string name = opt->get_name(), type = opt->get_type_name();
      if (name.find("bytes") != std::string::npos || name.find("memory") != std::string::npos) opt->type_name("SIZE");
      else if (name == "--timeout") opt->type_name("SECONDS");
      else if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) opt->type_name("N");
    }
  }
  // The command a usage error belongs to, for the one line that points at its --help.
  std::string command;
  for (int i = 1; i < argc && command.empty(); ++i) {
    for (CLI::App* sub : commands) {
      if (sub->get_name() == argv[i]) command = argv[i];
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, always: CLI11's own message, then where the help is.
    std::string what = nanprov::firstLine(e.what());
    while (!what.empty() && (what.back() == '.' || what.back() == ' ')) what.pop_back();
    std::cerr << "nanprov" << (command.empty() ? "" : " " + command) << ": " << nanprov::printable(what)
              << "; see nanprov " << (command.empty() ? "" : command + " ") << "--help\n";
    return nanprov::kUsageError;
  } catch (const std::exception& e) {
    // Whatever a damaged input provokes that a command did not foresee: one line, never abort().
    std::cerr << "nanprov: could not read the input: " << nanprov::firstLine(e.what())
              << "; if the run is intact, this is a nanprov bug\n";
    return nanprov::kInputError;
  } catch (...) {
    std::cerr << "nanprov: internal error; this is a nanprov bug\n";
    return nanprov::kInputError;
  }
  return exit_code;
}
