// The element types a capture file holds, in one table: safetensors' spelling (what the file says),
// torch's name (what the repro script and the report say), the bytes per element and LibTorch's
// C++ name (what the store says). The LibTorch side of the same table (at::ScalarType) is
// base/records/torch_dtype.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace nanprov {

struct DtypeInfo {
  const char* safetensors;  // "BF16"
  const char* torch;        // "bfloat16", as torch.<name> spells it
  size_t bytes;             // per element
  const char* cpp;          // "BFloat16", as LibTorch's C++ names it (the store's spelling)
};

// Every dtype a capture may hold, in the order the table lists them.
const std::vector<DtypeInfo>& captureDtypes();

// The entry for a safetensors spelling; nullptr when the capture format has no such dtype.
const DtypeInfo* dtypeOfCapture(std::string_view safetensors);

// The entry for LibTorch's C++ name of a dtype ("BFloat16"); nullptr when no capture holds it.
const DtypeInfo* dtypeOfCppName(std::string_view cpp);
// torch's name for LibTorch's C++ name ("float16" for "Half"), as users write it; a dtype the
// table lacks keeps its C++ name.
std::string torchDtypeName(std::string_view cpp);
// Bytes per element of a safetensors dtype; 0 when the dtype is unknown.
size_t dtypeSize(std::string_view safetensors);

}  // namespace nanprov
