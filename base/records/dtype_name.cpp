#include "base/records/dtype_name.h"

#include <cstring>

#include "base/interned_text.h"

namespace nanprov {

DtypeName DtypeName::intern(std::string_view name) {
  // A store written by something else may name any number of dtypes: past 256, the rest read as
  // one placeholder.
  return DtypeName(internDtypeName(name));
}

bool DtypeName::operator==(const DtypeName& other) const {
  return name_ == other.name_ || std::strcmp(name_, other.name_) == 0;
}

}  // namespace nanprov
