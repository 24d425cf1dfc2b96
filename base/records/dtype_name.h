// A tensor's element type as PyTorch's C++ names it ("Float", "BFloat16", "Half", "Bool"): the
// name a call's tensors carry in the store. The probes hand over the static name LibTorch keeps
// (no copy on the training thread); readers intern what a store says, so a DtypeName is always a
// pointer to a name that lives as long as the process.
#pragma once

#include <string>
#include <string_view>

namespace nanprov {

class DtypeName {
 public:
  DtypeName() = default;
  // `name` must outlive the process (LibTorch's c10::toString names do).
  static DtypeName ofStatic(const char* name) { return DtypeName(name); }
  // The same name, kept in a table of names seen (a handful in practice).
  static DtypeName intern(std::string_view name);

  const char* c_str() const { return name_; }
  std::string str() const { return name_; }
  bool empty() const { return *name_ == '\0'; }
  bool operator==(const DtypeName& other) const;
  bool operator==(std::string_view other) const { return other == name_; }

 private:
  explicit DtypeName(const char* name) : name_(name) {}
  const char* name_ = "";
};

}  // namespace nanprov
