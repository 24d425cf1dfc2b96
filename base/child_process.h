// Runs the user's command as a child and passes its exit code and signals through.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace nanprov {

// `path` from the root: the current directory prefixed when it is relative, for a child that runs
// elsewhere (plain getcwd, not std::filesystem: torch 2.11's CUDA libtorch.so exports its own
// std::filesystem functions, which the replay engine bound to and crashed in on the H200).
std::string absolutePath(const std::string& path);

// Where `name` resolves on PATH (or itself when it contains '/'); empty unless it is an
// executable regular file.
std::string findExecutable(const std::string& name);
// When findExecutable(name) is empty, why, in one line: not found, a directory, not executable.
std::string whyNotExecutable(const std::string& name);

struct ChildExit {
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the signal that killed the child, 0 when it exited
  // The code a wrapper should exit with: the child's, or 128 + signal.
  int passThroughCode() const { return signal ? 128 + signal : exit_code; }
};

// Starts argv with `extra_env` added to the environment and waits for it. While it runs, signals
// sent to nanprov (SIGTERM, SIGHUP, SIGUSR1/2, and SIGINT/SIGQUIT sent by kill) are forwarded to
// it; terminal-generated SIGINT/SIGQUIT reach the child directly and are ignored here.
StatusOr<ChildExit> runChild(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env);

// Runs argv to completion and returns its stdout; for short helper commands. A non-empty
// `working_dir` is the child's current directory: a Python helper started with `-m` puts its
// current directory first on sys.path, so one run where the user stands would import whatever
// modules lie there (a bug-report folder replayed in place).
StatusOr<std::string> captureOutput(const std::vector<std::string>& argv,
                                    const std::map<std::string, std::string>& extra_env, int* exit_code,
                                    const std::string& working_dir = "");

// A child that answers one line per line it is sent (the replay engine's audit-serve mode): a
// long-lived helper, so what it loads at start is paid once. Its stderr is the caller's.
class LineChild {
 public:
  static StatusOr<std::unique_ptr<LineChild>> start(const std::vector<std::string>& argv,
                                                    const std::map<std::string, std::string>& extra_env);
  ~LineChild();  // closes its stdin and waits for it to end
  LineChild(const LineChild&) = delete;
  LineChild& operator=(const LineChild&) = delete;

  // Sends `line` and waits for the answer; an error when the child has ended (it crashed).
  StatusOr<std::string> ask(const std::string& line);

 private:
  LineChild(int pid, int to, int from) : pid_(pid), to_(to), from_(from) {}
  int pid_, to_, from_;
  std::string buffered_;
};

}  // namespace nanprov
