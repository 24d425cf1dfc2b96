// The C entry points the Python bootstrap calls through ctypes (declared in c_abi.h). Tiny on
// purpose: each reads its argument, forwards to the Session, and never lets an exception or a
// failure reach the training process.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/crash_backtrace.h"
#include "probes/core/run_facts.h"
#include "probes/core/session.h"
#include "probes/libtorch/attention_hook.h"
#include "probes/libtorch/c_abi.h"
#include "probes/libtorch/call_recorder.h"
#include "probes/libtorch/guarded.h"
#include "probes/libtorch/install_probes.h"
#include "probes/libtorch/probe_thread.h"
#include "probes/libtorch/probes.h"

using nanprov::probes::processProbes;  // the C ABI below reaches the probes through it alone

namespace {
thread_local std::string t_last_error;

// Ends the process without Python: C's exit() from native code or ctypes. Python's atexit has
// not run, so the store is closed here; after a normal interpreter exit this is a no-op.
void closeStoreAtCExit() { processProbes().session().finalize(/*collect=*/false); }

// SIGTERM (a launcher stopping its workers) kills by default and runs no exit hook. When the
// training left it at the default, nanprov catches it only to close the store first: the signal
// handler writes one byte to a pipe, a waiting thread closes the store (at most two seconds), and
// then the process dies of SIGTERM as it would have, with the same exit status.
int g_term_pipe[2] = {-1, -1};
pid_t g_term_owner = 0;

void onSigterm(int sig) {
  if (getpid() != g_term_owner) {  // a forked child: behave as if nanprov were not there
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  char byte = 1;
  if (write(g_term_pipe[1], &byte, 1) < 0) {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

void closeStoreThenDie() {
  char byte;
  while (read(g_term_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  auto closed = std::make_shared<std::promise<void>>();
  std::future<void> done = closed->get_future();
  std::thread([closed] {
    processProbes().session().finalize(/*collect=*/false);
    closed->set_value();
  }).detach();
  done.wait_for(std::chrono::seconds(2));
  signal(SIGTERM, SIG_DFL);
  kill(getpid(), SIGTERM);
}

void resetSigtermInChild() { signal(SIGTERM, SIG_DFL); }

void installExitHooks() {
  std::atexit(&closeStoreAtCExit);
  struct sigaction current{};
  if (sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  if (pipe2(g_term_pipe, O_CLOEXEC) != 0) return;
  g_term_owner = getpid();
  std::thread(&closeStoreThenDie).detach();
  pthread_atfork(nullptr, nullptr, &resetSigtermInChild);
  struct sigaction handler{};
  handler.sa_handler = &onSigterm;
  sigemptyset(&handler.sa_mask);
  handler.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &handler, nullptr);
}
}  // namespace

// The C ABI (probes/libtorch/c_abi.h says what each function does).

int nanprov_start(void) {
  if (const char* debug = std::getenv("NANPROV_DEBUG_CRASH"); debug && *debug == '1') {
    nanprov::printBacktraceOnCrash();  // for bug reports; off by default: the training owns its handlers
  }
  nanprov::Status st = processProbes().session().start();
  if (st.ok()) st = nanprov::probes::installProbes();
  if (!st.ok()) {
    t_last_error = st.message();
    processProbes().session().finalize();
    return 1;
  }
  installExitHooks();
  return 0;
}

const char* nanprov_last_error(void) { return t_last_error.c_str(); }

void nanprov_step(long long step) { processProbes().session().stepEnded(step); }

void nanprov_set_module_resolver(nanprov_module_resolver resolve) {
  processProbes().session().setModuleResolver(resolve);
}

void nanprov_count_unprobed(const char* what, long long n) {
  if (what && n > 0) processProbes().session().countUnprobed(what, n);
}

void nanprov_compiled_grad_mode(int mode) { nanprov::probes::setCompiledGradMode(mode); }

const char* nanprov_probe_op(const char* name, const char* roles, const char* backend) {
  static thread_local std::string why;
  std::vector<std::pair<std::string, nanprov::Role>> mapped;
  std::string text = roles ? roles : "";
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string pair = text.substr(begin, end - begin);
    size_t eq = pair.find('=');
    std::string key = pair.substr(0, eq);
    auto role = key == "q"   ? nanprov::Role::kQ
                : key == "k" ? nanprov::Role::kK
                : key == "v" ? nanprov::Role::kV
                             : nanprov::Role::kO;
    if (eq != std::string::npos && (key == "q" || key == "k" || key == "v" || key == "o")) {
      mapped.emplace_back(pair.substr(eq + 1), role);
    }
    begin = end + 1;
  }
  nanprov::Status st = nanprov::probes::probeOperator(name ? name : "", mapped, backend ? backend : "op");
  why = st.ok() ? "" : st.message();
  return why.c_str();
}

long long nanprov_foreign_calls(void) { return nanprov::probes::foreignCallsRecorded(); }

void nanprov_trail_compiled(void) {
  static std::atomic<bool> noted{false};
  if (!noted.exchange(true)) processProbes().session().setCounters({.trail_compiled = true});
}

void nanprov_become_worker(void) { processProbes().session().becomeWorker(); }

void nanprov_graph_capture_began(long long key) {
  nanprov::probes::guarded("graph capture", [&] { processProbes().checks().graphCaptureBegan(key); });
}

void nanprov_graph_replayed(long long key) {
  nanprov::probes::guarded("graph replay", [&] { processProbes().checks().graphs().replayed(key); });
}

void nanprov_graph_reset(long long key) {
  nanprov::probes::guarded("graph reset", [&] { processProbes().checks().graphs().reset(key); });
}

void nanprov_graph_pool(int entering) { nanprov::probes::GraphChecks::enterGraphPool(entering != 0); }

int nanprov_set_fact(const char* key, const char* value) {
  if (!key || !value) return 1;
  return nanprov::probes::setRunFact(key, value) ? 0 : 1;
}

void nanprov_process_group(int rank, int world_size, int local_rank) {
  nanprov::probes::guarded("process group", [&] { processProbes().session().learnRank(rank, world_size, local_rank); });
}

void nanprov_mesh(const char* coordinates) {
  if (!coordinates || std::strlen(coordinates) > 512) return;
  nanprov::probes::guarded("device mesh", [&] { processProbes().session().setCounters({.mesh = coordinates}); });
}

void nanprov_shutdown(void) {
  processProbes().session().finalize();
  processProbes().session().setModuleResolver(nullptr);
}
