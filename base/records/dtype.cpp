#include "base/records/dtype.h"

namespace nanprov {

const std::vector<DtypeInfo>& captureDtypes() {
  static const std::vector<DtypeInfo> table = {
      {"F64", "float64", 8},   {"F32", "float32", 4},   {"F16", "float16", 2},
      {"BF16", "bfloat16", 2}, {"BOOL", "bool", 1},     {"I64", "int64", 8},
      {"I32", "int32", 4},     {"I16", "int16", 2},     {"I8", "int8", 1},
      {"U8", "uint8", 1},      {"U64", "uint64", 8},    {"U32", "uint32", 4},
      {"U16", "uint16", 2},    {"F8_E4M3", "float8_e4m3fn", 1}, {"F8_E5M2", "float8_e5m2", 1}};
  return table;
}

const DtypeInfo* dtypeOfCapture(std::string_view safetensors) {
  for (const DtypeInfo& d : captureDtypes()) {
    if (safetensors == d.safetensors) return &d;
  }
  return nullptr;
}

size_t dtypeSize(std::string_view safetensors) {
  const DtypeInfo* d = dtypeOfCapture(safetensors);
  return d ? d->bytes : 0;
}

}  // namespace nanprov
