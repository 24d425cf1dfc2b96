// The C entry points the Python bootstrap calls through ctypes. Tiny on purpose: each reads its
// argument, forwards to the Session, and never lets an exception or a failure reach the
// training process.
#include <cstdio>
#include <string>

#include "probes/attention_hook.h"
#include "probes/session.h"

namespace {
thread_local std::string t_last_error;
}

extern "C" {

// Returns 0 when the probes are live. On failure returns 1 and nanprov_last_error() says why.
__attribute__((visibility("default"))) int nanprov_start() {
  nanprov::Status st = nanprov::Session::get().start();
  if (st.ok()) st = nanprov::installAttentionProbes();
  if (!st.ok()) {
    t_last_error = st.message();
    nanprov::Session::get().finalize();
    return 1;
  }
  return 0;
}

__attribute__((visibility("default"))) const char* nanprov_last_error() { return t_last_error.c_str(); }

// `step` is the number of optimizer steps completed so far.
__attribute__((visibility("default"))) void nanprov_step(long long step) {
  nanprov::Session::get().stepEnded(step);
}

__attribute__((visibility("default"))) void nanprov_set_module(const char* path) {
  nanprov::Session::setModulePath(path);
}

// Final flush; called from the interpreter's exit. Later calls are no-ops.
__attribute__((visibility("default"))) void nanprov_shutdown() { nanprov::Session::get().finalize(); }

}  // extern "C"
