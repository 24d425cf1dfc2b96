#include "base/records/dtype_name.h"

#include <cstring>
#include <mutex>
#include <set>

namespace nanprov {

DtypeName DtypeName::intern(std::string_view name) {
  // A store written by something else may name any number of dtypes: past this many, the rest
  // read as one placeholder instead of growing the table without bound.
  constexpr size_t kMaxNames = 256;
  static std::mutex mu;
  static auto* names = new std::set<std::string, std::less<>>();  // leaked: names live as long as the process
  std::lock_guard<std::mutex> lock(mu);
  auto it = names->find(name);
  if (it == names->end()) {
    if (names->size() >= kMaxNames) return DtypeName("?");
    it = names->emplace(name).first;
  }
  return DtypeName(it->c_str());
}

bool DtypeName::operator==(const DtypeName& other) const {
  return name_ == other.name_ || std::strcmp(name_, other.name_) == 0;
}

}  // namespace nanprov
