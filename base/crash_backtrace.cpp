#include "base/crash_backtrace.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

namespace nanprov {
namespace {

void printBacktrace(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  dprintf(STDERR_FILENO, "nanprov: signal %d, native backtrace:\n", sig);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void printBacktraceOnCrash() {
  signal(SIGSEGV, &printBacktrace);
  signal(SIGABRT, &printBacktrace);
}

}  // namespace nanprov
