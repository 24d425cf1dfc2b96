// Small text helpers shared by the CLI and the replay engine.
#pragma once

#include <cstdio>
#include <string>

namespace nanprov {

// The first line of a message: c10 and other libraries append stack traces after a newline, and
// nanprov prints one line per error.
inline std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// A figure for people: three significant digits ("0.000353", "1.5e-11", "44.7").
inline std::string shortNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace nanprov
