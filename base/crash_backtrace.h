// A native backtrace on stderr when the process dies of SIGSEGV or SIGABRT, for bug reports against
// nanprov itself. The replay engine installs it always (it is nanprov's own process); the probes
// only with NANPROV_DEBUG_CRASH=1, since the training process owns its signal handlers.
#pragma once

namespace nanprov {

void printBacktraceOnCrash();

}  // namespace nanprov
