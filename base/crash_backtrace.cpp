#include "base/crash_backtrace.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

namespace nanprov {
namespace {

// "libfoo.so(symbol+0x12) [module offset 0x3456]", or the bare address when no module holds it.
void printAddress(const char* what, void* address) {
  Dl_info info{};
  if (address && dladdr(address, &info) && info.dli_fname) {
    const auto offset = reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_fbase);
    dprintf(STDERR_FILENO, "  %s %p: %s(%s) module offset 0x%lx\n", what, address, info.dli_fname,
            info.dli_sname ? info.dli_sname : "?", static_cast<unsigned long>(offset));
  } else {
    dprintf(STDERR_FILENO, "  %s %p: in no loaded module\n", what, address);
  }
}

void printBacktrace(int sig, siginfo_t* info, void* context) {
  void* frames[64];
  int n = backtrace(frames, 64);
  dprintf(STDERR_FILENO, "nanprov: signal %d (address %p), native backtrace:\n", sig, info ? info->si_addr : nullptr);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
#if defined(__x86_64__)
  // The unwinder stops at a jump to a bad address (a null function pointer), which is when the
  // backtrace above is shortest: the faulting PC and the words on top of the stack (the caller's
  // return address among them) still name where it came from.
  if (auto* uc = static_cast<ucontext_t*>(context)) {
    printAddress("pc", reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]));
    auto* sp = reinterpret_cast<void**>(uc->uc_mcontext.gregs[REG_RSP]);
    for (int i = 0; sp && i < 8; ++i) printAddress("stack", sp[i]);
  }
#else
  (void)context;
#endif
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void printBacktraceOnCrash() {
  struct sigaction act{};
  act.sa_sigaction = &printBacktrace;
  act.sa_flags = SA_SIGINFO;
  sigemptyset(&act.sa_mask);
  sigaction(SIGSEGV, &act, nullptr);
  sigaction(SIGABRT, &act, nullptr);
}

}  // namespace nanprov
