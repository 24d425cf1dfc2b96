// run.json, the run directory's own file: what `nanprov run` was asked (the command, the audit's
// settings, ...) and how the training ended. `nanprov run` claims the directory by creating it,
// writes it when the training starts and again when it ends; every reader takes it from here,
// loaded once with the run (RunData::settings).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace nanprov::store {

inline constexpr const char* kRunFileName = "run.json";

struct RunFile {
  bool readable = false;              // false: missing, damaged or not an object
  std::vector<std::string> command;   // a word that is not text reads "?"
  std::string torch;                  // the torch nanprov was built against, which the run's processes had to import
  std::optional<int> exit_code;       // set when the training exited
  std::optional<std::string> signal;  // set when a signal ended it ("SIGKILL")
  std::optional<int64_t> started_ns;  // when `nanprov run` started it (CLOCK_REALTIME); none in older runs
  std::vector<std::string> probe_modules;  // the --probe-module SPECs it was given
  struct Audit {
    bool on = false, warn_only = false;
    int64_t every_steps = 0;
    double budget_percent = 0;
  } audit;

  bool ended() const { return exit_code.has_value() || signal.has_value(); }
};

// The run directory's run.json, as far as it reads; never an error (readers say in words what a
// missing or damaged one means for them).
RunFile readRunFile(const std::string& dir);

// Creates run.json exclusively (O_EXCL): of two runs started into one directory, even in the same
// second, exactly one gets it. false: it exists (another run holds the directory).
StatusOr<bool> claimRunFile(const std::string& dir);

// Writes the run's settings (and, at the end, its exit) over the claimed file. An error (a full
// disk) says the path and why.
Status writeRunFile(const std::string& dir, const nlohmann::json& doc);

}  // namespace nanprov::store
