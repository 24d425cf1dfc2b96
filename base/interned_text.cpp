#include "base/interned_text.h"

#include <mutex>
#include <set>
#include <string>

namespace nanprov {
namespace {

class InternTable {
 public:
  InternTable(size_t limit, const char* overflow) : limit_(limit), overflow_(overflow) {}

  const char* intern(std::string_view text) {
    if (text.empty()) return kEmptyText;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = names_.find(text);
    if (it == names_.end()) {
      if (names_.size() >= limit_) return overflow_;
      it = names_.emplace(text).first;
    }
    return it->c_str();  // std::set never moves its elements
  }

 private:
  const size_t limit_;
  const char* const overflow_;
  std::mutex mu_;
  std::set<std::string, std::less<>> names_;
};

}  // namespace

const char* internText(std::string_view text) {
  // Module paths of the largest models are a few thousand; readers intern the reasons a store holds.
  static auto* table = new InternTable(1 << 20, "?");  // leaked: the names live as long as the process
  return table->intern(text);
}

const char* internDtypeName(std::string_view name) {
  static auto* table = new InternTable(256, "?");
  return table->intern(name);
}

}  // namespace nanprov
