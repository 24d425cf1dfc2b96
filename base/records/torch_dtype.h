// The LibTorch side of base/records/dtype.h: which at::ScalarType a capture dtype is read into and
// written from. Header-only, for the translation units that already include LibTorch (the probes'
// capture writer and replay's reader). The spellings are the table's, found through LibTorch's
// C++ name of the type; this side lists only which types replay computes with, a subset of it.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "base/records/dtype.h"

namespace nanprov {

inline constexpr std::array<at::ScalarType, 8> kCapturedScalarTypes = {
    at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kBool, at::kLong, at::kInt, at::kByte};

// The safetensors spelling of `t` ("BF16"); nullptr for a type nanprov does not capture.
inline const char* captureDtypeOf(at::ScalarType t) {
  if (std::find(kCapturedScalarTypes.begin(), kCapturedScalarTypes.end(), t) == kCapturedScalarTypes.end()) {
    return nullptr;
  }
  const DtypeInfo* d = dtypeOfCppName(c10::toString(t));  // "BFloat16"
  return d ? d->safetensors : nullptr;
}

inline std::optional<at::ScalarType> scalarTypeOfCapture(std::string_view safetensors) {
  for (at::ScalarType t : kCapturedScalarTypes) {
    const char* spelled = captureDtypeOf(t);
    if (spelled && safetensors == spelled) return t;
  }
  return std::nullopt;
}

}  // namespace nanprov
