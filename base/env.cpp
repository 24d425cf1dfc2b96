#include "base/env.h"

#include <cstdlib>

namespace nanprov {

int64_t envInteger(const char* name, int64_t fallback, int64_t min) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  return end && *end == '\0' && x >= min ? static_cast<int64_t>(x) : fallback;
}

}  // namespace nanprov
