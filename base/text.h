// Small text helpers shared by the CLI and the replay engine.
#pragma once

#include <string>

namespace nanprov {

// The first line of a message: c10 and other libraries append stack traces after a newline, and
// nanprov prints one line per error.
inline std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace nanprov
