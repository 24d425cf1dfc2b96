#include "base/records/dtype.h"

namespace nanprov {

const std::vector<DtypeInfo>& captureDtypes() {
  static const std::vector<DtypeInfo> table = {{"F64", "float64", 8, "Double"},
                                               {"F32", "float32", 4, "Float"},
                                               {"F16", "float16", 2, "Half"},
                                               {"BF16", "bfloat16", 2, "BFloat16"},
                                               {"BOOL", "bool", 1, "Bool"},
                                               {"I64", "int64", 8, "Long"},
                                               {"I32", "int32", 4, "Int"},
                                               {"I16", "int16", 2, "Short"},
                                               {"I8", "int8", 1, "Char"},
                                               {"U8", "uint8", 1, "Byte"},
                                               {"U64", "uint64", 8, "UInt64"},
                                               {"U32", "uint32", 4, "UInt32"},
                                               {"U16", "uint16", 2, "UInt16"},
                                               {"F8_E4M3", "float8_e4m3fn", 1, "Float8_e4m3fn"},
                                               {"F8_E5M2", "float8_e5m2", 1, "Float8_e5m2"}};
  return table;
}

const DtypeInfo* dtypeOfCapture(std::string_view safetensors) {
  for (const DtypeInfo& d : captureDtypes()) {
    if (safetensors == d.safetensors) return &d;
  }
  return nullptr;
}

const DtypeInfo* dtypeOfCppName(std::string_view cpp) {
  for (const DtypeInfo& d : captureDtypes()) {
    if (cpp == d.cpp) return &d;
  }
  return nullptr;
}

std::string torchDtypeName(std::string_view cpp) {
  const DtypeInfo* d = dtypeOfCppName(cpp);
  return d ? std::string(d->torch) : std::string(cpp);
}

size_t dtypeSize(std::string_view safetensors) {
  const DtypeInfo* d = dtypeOfCapture(safetensors);
  return d ? d->bytes : 0;
}

}  // namespace nanprov
