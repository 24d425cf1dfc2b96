// The nanprov subcommands. Each add*Command registers its options and sets *exit_code when run.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/exit_codes.h"
#include "base/status.h"
#include "report/outcome.h"
#include "store/reader.h"

namespace nanprov::cli {

// report's exit code for what it concluded: audit findings count unless the run asked for
// warnings only (nanprov run --audit-warn-only) or `warn_only` is set.
int reportExitCode(const report::Conclusion& c, bool warn_only = false);

// Option text checks for numbers people type: digits only ("3"), and sizes ("512M", "1G"),
// which sizeValue turns into their byte count (a transform: use it in place of check).
CLI::Validator wholeNumber();
CLI::Validator sizeValue();
CLI::Validator percentText();  // "1", "0.5", "100"

// The options most commands share, with one wording: the run directory arguments (default: the
// newest run under ./nanprov-runs; several: one job's directories, one per node) and --json.
CLI::Option* addRunArgument(CLI::App* cmd, std::vector<std::string>* runs);
CLI::Option* addJsonFlag(CLI::App* cmd, bool* json);

// Prints "nanprov <command>: <message>" on stderr and returns kInputError.
int fail(const std::string& command, const Status& status);

// The run directories named on the command line (or the newest run); several are checked to be
// one job's (store/job.h). On failure prints the one-line error for `command` and sets
// *exit_code (kNotOneJob when they are not one job's).
std::optional<store::RunDirs> resolveRunDirs(const std::string& command, const std::vector<std::string>& given,
                                             int* exit_code);

// The run named on the command line (or the newest), loaded; on failure prints the one-line
// error for `command` and sets *exit_code.
std::optional<store::RunData> openRun(const std::string& command, const std::vector<std::string>& given, int* exit_code,
                                      store::RunScope scope);

// `wrapped` is what followed "--" on the command line: the command to run.
void addRunCommand(CLI::App& app, int* exit_code, std::vector<std::string> wrapped);
void addReportCommand(CLI::App& app, int* exit_code);
void addRunsCommand(CLI::App& app, int* exit_code);
void addCallsCommand(CLI::App& app, int* exit_code);
void addKernelsCommand(CLI::App& app, int* exit_code);
void addReplayCommand(CLI::App& app, int* exit_code);
void addSqlCommand(CLI::App& app, int* exit_code);
void addDoctorCommand(CLI::App& app, int* exit_code);
void addKnownIssuesCommand(CLI::App& app, int* exit_code);
void addTraceCommand(CLI::App& app, int* exit_code);
void addVerdictCommand(CLI::App& app, int* exit_code);

}  // namespace nanprov::cli
