#include "base/child_process.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

extern char** environ;

namespace nanprov {
namespace {

volatile sig_atomic_t g_child = 0;

void forward(int sig, siginfo_t* info, void*) {
  bool from_terminal = (sig == SIGINT || sig == SIGQUIT) && info && info->si_code == SI_KERNEL;
  if (g_child > 0 && !from_terminal) kill(g_child, sig);
}

constexpr int kForwarded[] = {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT};

std::vector<std::string> mergedEnvironment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!extra.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> cStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

StatusOr<pid_t> spawn(std::vector<std::string> argv, const std::map<std::string, std::string>& extra_env,
                      posix_spawn_file_actions_t* actions) {
  std::string path = findExecutable(argv[0]);
  if (path.empty()) return Status::Error("command not found: " + argv[0]);
  // Resolved here, where it was found: a child given another working directory would look for a
  // relative path there.
  path = absolutePath(path);
  std::vector<std::string> env = mergedEnvironment(extra_env);
  std::vector<char*> cargv = cStrings(argv), cenv = cStrings(env);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, path.c_str(), actions, nullptr, cargv.data(), cenv.data());
  if (rc != 0) return Status::Error("cannot start " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

ChildExit waitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ChildExit exit;
  if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
  else exit.exit_code = WEXITSTATUS(status);
  return exit;
}

}  // namespace

namespace {

bool isExecutableFile(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string absolutePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  return getcwd(cwd, sizeof cwd) ? std::string(cwd) + "/" + path : path;
}

std::string findExecutable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return isExecutableFile(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (isExecutableFile(candidate)) return candidate;
  }
  return "";
}

std::string whyNotExecutable(const std::string& name) {
  struct stat st{};
  if (stat(name.c_str(), &st) != 0) return "command not found: " + name + " (not a file here, nor on PATH)";
  if (S_ISDIR(st.st_mode)) return name + " is a directory, not a command to run";
  // `nanprov run train.py`: the file is here, but a name without '/' is looked up on PATH only.
  if (name.find('/') == std::string::npos) {
    return name +
           " is a file here, not a command on PATH: run it through its interpreter, e.g. nanprov run -- python " + name;
  }
  return name + " is not executable (chmod +x it, or run it through its interpreter, e.g. python " + name + ")";
}

StatusOr<ChildExit> runChild(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& extra_env) {
  if (argv.empty()) return Status::Error("no command given");
  struct sigaction act{}, old[std::size(kForwarded)];
  act.sa_sigaction = &forward;
  act.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&act.sa_mask);
  for (size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &act, &old[i]);
  auto pid = spawn(argv, extra_env, nullptr);
  if (!pid.ok()) {
    for (size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &old[i], nullptr);
    return pid.status();
  }
  g_child = *pid;
  ChildExit exit = waitFor(*pid);
  g_child = 0;
  for (size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &old[i], nullptr);
  return exit;
}

StatusOr<std::string> captureOutput(const std::vector<std::string>& argv,
                                    const std::map<std::string, std::string>& extra_env, int* exit_code,
                                    const std::string& working_dir) {
  int fds[2];
  // Close-on-exec: a child that another thread spawns meanwhile (nanprov run starts the training
  // while its auditor runs the engine) must not hold the write end open.
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  if (!working_dir.empty()) posix_spawn_file_actions_addchdir_np(&actions, working_dir.c_str());
  auto pid = spawn(argv, extra_env, &actions);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  *exit_code = waitFor(*pid).passThroughCode();
  return out;
}

StatusOr<std::unique_ptr<LineChild>> LineChild::start(const std::vector<std::string>& argv,
                                                      const std::map<std::string, std::string>& extra_env) {
  int in[2], out[2];
  // Close-on-exec, as in captureOutput: other children started meanwhile must not hold our ends.
  if (pipe2(in, O_CLOEXEC) != 0) return Status::Error(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    return Status::Error(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  auto pid = spawn(argv, extra_env, &actions);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (!pid.ok()) {
    close(in[1]), close(out[0]);
    return pid.status();
  }
  return std::unique_ptr<LineChild>(new LineChild(*pid, in[1], out[0]));
}

LineChild::~LineChild() {
  close(to_);  // end of input: the child finishes and exits
  close(from_);
  waitFor(pid_);
}

StatusOr<std::string> LineChild::ask(const std::string& line) {
  std::string sent = line + "\n";
  // A write to a pipe whose reader died raises SIGPIPE, which would end nanprov itself: blocked on
  // this thread for the write, and a pending one taken back, so the write just fails with EPIPE.
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  int error = 0;
  for (size_t done = 0; done < sent.size();) {
    ssize_t n = write(to_, sent.data() + done, sent.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : EPIPE;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error == EPIPE) {
    const timespec none{};
    sigtimedwait(&pipe_only, nullptr, &none);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (error) return Status::Error(std::string("the helper stopped reading: ") + std::strerror(error));
  for (;;) {
    if (size_t end = buffered_.find('\n'); end != std::string::npos) {
      std::string answer = buffered_.substr(0, end);
      buffered_.erase(0, end + 1);
      return answer;
    }
    char buf[4096];
    ssize_t n = read(from_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error("the helper ended before it answered");
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace nanprov
