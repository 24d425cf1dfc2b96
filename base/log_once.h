// One line on stderr per kind of trouble: code that runs inside someone's training logs what went
// wrong and carries on, and must not flood the job's output with a line per event.
#pragma once

#include <string>

namespace nanprov {

// Logs "nanprov: <message>" to stderr the first time `key` is seen in this process.
void logOnce(const std::string& key, const std::string& message);

}  // namespace nanprov
