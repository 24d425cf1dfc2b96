#include "replay/backend_names.h"

#include <algorithm>

namespace nanprov::replay {
namespace {

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

const std::vector<std::string>& knownBackends() {
  static const std::vector<std::string> names = {"cudnn", "flash", "efficient", "math", "flash_cpu", "plain_softmax"};
  return names;
}

bool isKnownBackend(const std::string& backend) { return listed(knownBackends(), backend); }

const std::vector<std::string>& packageBackends() {
  static const std::vector<std::string> names = {"fa2", "fa3", "fa4", "ffpa"};
  return names;
}

bool rerunsThroughItsPackage(const std::string& backend) { return listed(packageBackends(), backend); }

}  // namespace nanprov::replay
