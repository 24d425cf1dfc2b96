// Reading the environment nanprov's processes are configured through (NANPROV_*, RANK, ...).
#pragma once

#include <cstdint>

namespace nanprov {

// The integer in environment variable `name`: `fallback` when unset, empty, not all digits (an
// optional leading '-'), or below `min`.
int64_t envInteger(const char* name, int64_t fallback, int64_t min = INT64_MIN);

}  // namespace nanprov
