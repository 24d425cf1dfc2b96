// guarded(): the probes' one way of running work inside someone's training. An exception is
// logged once and goes no further: a diagnostic tool never takes the training run down with it.
#pragma once

#include <exception>
#include <string>
#include <typeinfo>

#include "base/log_once.h"

namespace nanprov::probes {

// The reason an exception gives, or its type when it gives none (a Python error surfacing as a
// C++ exception can have an empty message).
inline std::string reasonOf(const std::exception& e) {
  std::string what = e.what();
  return what.empty() ? std::string("exception of type ") + typeid(e).name() : what;
}

// Runs `body`; an exception is logged once under `what` and goes no further.
template <typename F>
void guarded(const char* what, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    logOnce(what, std::string(what) + " failed, this call is not recorded: " + reasonOf(e));
  } catch (...) {
    logOnce(what, std::string(what) + " failed, this call is not recorded: unknown exception");
  }
}

}  // namespace nanprov::probes
