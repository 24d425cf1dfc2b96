// The LibTorch side of base/records/dtype.h: which at::ScalarType a capture dtype is read into and
// written from. Header-only, for the translation units that already include LibTorch (the probes'
// capture writer and replay's reader); the types replay computes with, a subset of the table.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string_view>

namespace nanprov {

inline const char* captureDtypeOf(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return "F64";
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kBool: return "BOOL";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kByte: return "U8";
    default: return nullptr;  // not a type nanprov captures
  }
}

inline std::optional<at::ScalarType> scalarTypeOfCapture(std::string_view safetensors) {
  for (at::ScalarType t : {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kBool, at::kLong, at::kInt, at::kByte}) {
    if (safetensors == captureDtypeOf(t)) return t;
  }
  return std::nullopt;
}

}  // namespace nanprov
