#include "store/call_signature.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <sstream>

#include "base/numbers.h"

namespace nanprov {

std::string tensorsDescription(const CallRecord& call) {
  std::string out;
  for (const TensorHealth& t : call.tensors) {
    if (!out.empty()) out += ';';
    out += t.role + ' ' + t.dtype + ' ' + t.shape + ' ' + std::to_string(t.numel);
  }
  return out;
}

std::string signatureKey(const CallRecord& call) {
  const char sep = '\x1f';
  return call.op + sep + call.backend + sep + call.module + sep + call.device + sep + tensorsDescription(call);
}

std::vector<TensorHealth> tensorsFromDescription(const std::string& text) {
  std::vector<TensorHealth> out;
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ';')) {
    std::stringstream fields(item);
    TensorHealth t;
    std::string numel;
    if (!(fields >> t.role >> t.dtype >> t.shape >> numel)) return {};
    auto n = parseInteger(numel, 0, INT64_MAX);
    if (!n) return {};
    t.numel = *n;
    out.push_back(std::move(t));
  }
  return out;
}

bool storedCompactly(const CallRecord& call) {
  if (call.health != 0) return false;
  for (const TensorHealth& t : call.tensors) {
    if (t.nonfinite() || t.all_zero || t.masked_rows > 0 || !(t.max_abs <= FLT_MAX)) return false;
    if (t.role.find_first_of(" ;") != std::string::npos || t.dtype.find_first_of(" ;") != std::string::npos ||
        t.shape.find_first_of(" ;") != std::string::npos) {
      return false;  // a description could not hold it
    }
  }
  return true;
}

std::string maxAbsBlob(const CallRecord& call) {
  std::string blob(call.tensors.size() * sizeof(float), '\0');
  for (size_t i = 0; i < call.tensors.size(); ++i) {
    float v = static_cast<float>(call.tensors[i].max_abs);
    std::memcpy(&blob[i * sizeof(float)], &v, sizeof(float));  // little-endian hosts only, as CUDA's
  }
  return blob;
}

bool fillMaxAbs(const void* blob, size_t bytes, std::vector<TensorHealth>& tensors) {
  if (bytes != tensors.size() * sizeof(float)) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    float v = 0;
    std::memcpy(&v, static_cast<const char*>(blob) + i * sizeof(float), sizeof(float));
    tensors[i].max_abs = v;
  }
  return true;
}

}  // namespace nanprov
