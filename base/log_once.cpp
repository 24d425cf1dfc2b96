#include "base/log_once.h"

#include <cstdio>
#include <mutex>
#include <set>

#include "base/text.h"

namespace nanprov {

void logOnce(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static auto* seen = new std::set<std::string>();  // leaked: a late log during static destruction still works
  std::lock_guard<std::mutex> lock(mu);
  if (seen->insert(key).second) std::fprintf(stderr, "nanprov: %s\n", printable(message).c_str());
}

}  // namespace nanprov
