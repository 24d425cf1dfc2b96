#include "store/call_signature.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <sstream>

#include "base/numbers.h"

namespace nanprov::store {

std::string tensorsDescription(const CallRecord& call) {
  std::string out;
  for (const TensorHealth& t : call.tensors) {
    if (!out.empty()) out += ';';
    out += std::string(roleName(t.role)) + ' ' + t.dtype.c_str() + ' ' + t.shape.text() + ' ' + std::to_string(t.numel);
  }
  return out;
}

std::string signatureKey(const CallRecord& call) {
  const char sep = '\x1f';
  return call.op + sep + call.backend + sep + call.module + sep + call.device.name() + sep + tensorsDescription(call);
}

std::vector<TensorHealth> tensorsFromDescription(const std::string& text) {
  std::vector<TensorHealth> out;
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ';')) {
    std::stringstream fields(item);
    TensorHealth t;
    std::string role, dtype, shape, numel;
    if (!(fields >> role >> dtype >> shape >> numel)) return {};
    auto r = parseRole(role);
    auto s = TensorShape::parse(shape);
    auto n = parseInteger(numel, 0, INT64_MAX);
    if (!r || !s || !n) return {};
    t.role = *r;
    t.dtype = DtypeName::intern(dtype);
    t.shape = *s;
    t.numel = *n;
    out.push_back(std::move(t));
  }
  return out;
}

bool describable(const CallRecord& call) {
  for (const TensorHealth& t : call.tensors) {
    // Role and shape are typed; only a dtype read back from somewhere else could break the format.
    if (t.dtype.empty() || std::strpbrk(t.dtype.c_str(), " ;")) return false;
  }
  return true;
}

bool storedCompactly(const CallRecord& call) {
  if (call.health != 0 || !describable(call)) return false;
  for (const TensorHealth& t : call.tensors) {
    if (t.nonfinite() || t.all_zero || t.masked_rows > 0 || !(t.max_abs <= FLT_MAX)) return false;
  }
  return true;
}

namespace {
// Per tensor: nan, posinf, neginf, masked_rows (int64), max |x| (double), all zero (one byte).
constexpr size_t kDetailBytes = 4 * sizeof(int64_t) + sizeof(double) + 1;
}  // namespace

std::string detailBlob(const CallRecord& call) {
  std::string blob(call.tensors.size() * kDetailBytes, '\0');
  char* at = blob.data();
  for (const TensorHealth& t : call.tensors) {
    for (int64_t v : {t.nan, t.posinf, t.neginf, t.masked_rows}) {
      std::memcpy(at, &v, sizeof v);
      at += sizeof v;
    }
    std::memcpy(at, &t.max_abs, sizeof t.max_abs);
    at += sizeof t.max_abs;
    *at++ = t.all_zero ? 1 : 0;
  }
  return blob;
}

bool fillDetail(const void* blob, size_t bytes, std::vector<TensorHealth>& tensors) {
  if (bytes != tensors.size() * kDetailBytes) return false;
  const char* at = static_cast<const char*>(blob);
  for (TensorHealth& t : tensors) {
    for (int64_t* v : {&t.nan, &t.posinf, &t.neginf, &t.masked_rows}) {
      std::memcpy(v, at, sizeof *v);
      at += sizeof *v;
    }
    std::memcpy(&t.max_abs, at, sizeof t.max_abs);
    at += sizeof t.max_abs;
    t.all_zero = *at++ != 0;
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

}  // namespace nanprov::store
