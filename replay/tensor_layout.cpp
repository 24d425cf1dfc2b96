#include "replay/tensor_layout.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "base/numbers.h"
#include "base/pointer_alignment.h"

namespace nanprov::replay {
namespace {

// Memory a rebuilt layout may spend beyond the tensor's own bytes (the gaps between its rows and
// the elements before its offset): a view deep into a huge buffer is rebuilt with its alignment
// but not its whole offset, rather than allocating the buffer again.
constexpr int64_t kMaxExtraBytes = int64_t{256} << 20;

std::string listText(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Elements from the first to the last one the layout addresses, plus one; 0 for an empty tensor.
std::optional<int64_t> spanOf(at::IntArrayRef sizes, const std::vector<int64_t>& strides) {
  int64_t span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    int64_t step;
    if (__builtin_mul_overflow(sizes[d] - 1, strides[d], &step) || __builtin_add_overflow(span, step, &span))
      return std::nullopt;
  }
  return span;
}

std::vector<int64_t> denseStrides(at::IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t step = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = step;
    step *= std::max<int64_t>(1, sizes[d]);
  }
  return strides;
}

// An uninitialised tensor of `sizes` and `strides` on `options`' device, at `offset` elements into
// storage of its own, whose data pointer is `alignment`-aligned and no more (mod 256).
at::Tensor placed(at::IntArrayRef sizes, const std::vector<int64_t>& strides, int64_t offset, int64_t alignment,
                  int64_t span, const at::TensorOptions& options) {
  const int64_t item = static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  const int64_t elements = offset + span;
  at::Tensor buffer = at::empty({elements * item + kAlignmentCap}, options.dtype(at::kByte));
  const auto base = reinterpret_cast<uintptr_t>(buffer.data_ptr());
  const uintptr_t want = static_cast<uintptr_t>(alignment % kAlignmentCap);  // 256 itself: residue 0
  const uintptr_t at_offset = base + static_cast<uintptr_t>(offset * item);
  const uintptr_t pad = (want - at_offset % kAlignmentCap + kAlignmentCap) % kAlignmentCap;
  // The storage starts `pad` bytes into the buffer; the deleter keeps the buffer alive with it.
  at::Tensor storage = at::from_blob(reinterpret_cast<uint8_t*>(base) + pad, {elements}, [buffer](void*) {}, options);
  return storage.as_strided(sizes, strides, offset);
}

// Whether no two indices of `t` address one element: taken by stride, each dimension must step
// past everything the smaller ones reach. (at::has_internal_overlap gives up on views with gaps,
// such as q sliced out of a fused projection.)
bool addressesEachElementOnce(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dimensions that vary
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest offset the smaller dimensions address
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return false;
    reach += stride * (size - 1);
  }
  return true;
}

// Writes `values` into `dst` (same sizes). A dimension of stride 0 addresses one element for all its
// indices: written once, from index 0, after checking that `values` agree along it. False when no
// copy can fill the layout (other overlapping strides, or values that differ along a broadcast).
bool fillLayout(at::Tensor dst, at::Tensor values) {
  for (int64_t d = 0; d < dst.dim(); ++d) {
    if (dst.stride(d) != 0 || dst.size(d) <= 1) continue;
    if (!values.equal(values.narrow(d, 0, 1).expand_as(values))) return false;
    dst = dst.narrow(d, 0, 1);
    values = values.narrow(d, 0, 1);
  }
  if (!addressesEachElementOnce(dst)) return false;
  dst.copy_(values);
  return true;
}

}  // namespace

StatusOr<TensorLayout> recordedLayout(const std::map<std::string, std::string>& meta, const std::string& role,
                                      int64_t dims) {
  TensorLayout out;
  auto text = [&](const std::string& key) -> const std::string* {
    auto it = meta.find(key + "." + role);
    return it == meta.end() ? nullptr : &it->second;
  };
  auto bad = [&](const std::string& key, const std::string& why) {
    return Status::Error(key + "." + role + " '" + *text(key) + "' " + why);
  };
  if (const std::string* s = text("stride")) {
    // "[1024,64,1]" as the probes write it (listText).
    std::string inner = s->size() >= 2 && s->front() == '[' && s->back() == ']' ? s->substr(1, s->size() - 2) : "?";
    std::vector<int64_t> strides;
    for (size_t begin = 0; !inner.empty() && begin <= inner.size();) {
      size_t end = std::min(inner.find(',', begin), inner.size());
      auto v = parseInteger(inner.substr(begin, end - begin), 0, std::numeric_limits<int64_t>::max() / 2);
      if (!v) return bad("stride", "is not a list of strides");
      strides.push_back(*v);
      begin = end + 1;
    }
    if (static_cast<int64_t>(strides.size()) != dims) {
      return bad("stride",
                 "has " + std::to_string(strides.size()) + " strides for " + std::to_string(dims) + " dimensions");
    }
    out.strides = strides;
  }
  if (const std::string* s = text("offset")) {
    auto v = parseInteger(*s, 0, std::numeric_limits<int64_t>::max() / 2);
    if (!v) return bad("offset", "is not a storage offset");
    out.storage_offset = *v;
  }
  if (const std::string* s = text("align")) {
    auto v = parseInteger(*s, 1, kAlignmentCap);
    if (!v || (*v & (*v - 1)) != 0) return bad("align", "is not a power of two from 1 to 256");
    out.alignment = *v;
  }
  return out;
}

TensorLayout layoutOf(const at::Tensor& t) {
  TensorLayout out;
  out.strides = t.strides().vec();
  out.storage_offset = t.storage_offset();
  out.alignment = pointerAlignment(t.data_ptr());
  return out;
}

at::Tensor withRecordedLayout(const at::Tensor& values, const TensorLayout& recorded, LayoutReport* report) {
  report->recorded = recorded;
  std::vector<std::string> missing;
  if (!recorded.strides) missing.push_back("strides");
  if (!recorded.storage_offset) missing.push_back("storage offset");
  if (!recorded.alignment) missing.push_back("alignment");
  const int64_t item = static_cast<int64_t>(values.element_size());
  std::vector<int64_t> strides = recorded.strides ? *recorded.strides : denseStrides(values.sizes());
  int64_t offset = recorded.storage_offset.value_or(0);
  int64_t alignment = recorded.alignment.value_or(kAlignmentCap);
  std::string note;
  if (!recorded.strides && !recorded.storage_offset && !recorded.alignment) {
    note = "layout not recorded, replayed contiguous";
  } else if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size(); ++i)
      list += (i ? (i + 1 == missing.size() ? " and " : ", ") : "") + missing[i];
    note = list + " not recorded: replayed " + (recorded.strides ? "with the run's strides" : "contiguous") +
           (recorded.storage_offset ? "" : " at storage offset 0") + (recorded.alignment ? "" : ", 256-byte aligned");
  }
  if (alignment < item) {  // a data pointer below its element's alignment: no kernel reads that
    note = "alignment " + std::to_string(alignment) + " is below the element size: replayed " + std::to_string(item) +
           "-byte aligned";
    alignment = item;
  }
  std::optional<int64_t> span = spanOf(values.sizes(), strides);
  if (!span || (*span - values.numel()) * item > kMaxExtraBytes) {
    note = "strides [" + listText(strides) + "] span more than 256 MiB beyond the tensor: replayed contiguous";
    strides = denseStrides(values.sizes());
    span = values.numel();
  }
  if (offset * item > kMaxExtraBytes) {
    note = "storage offset " + std::to_string(offset) +
           " is over 256 MiB into its buffer: replayed at offset 0 with the run's alignment";
    offset = 0;
  }
  at::Tensor out = placed(values.sizes(), strides, offset, alignment, *span, values.options());
  if (!fillLayout(out, values)) {
    note = "strides [" + listText(strides) +
           "] overlap (or the values differ along a broadcast dimension): replayed contiguous";
    out = placed(values.sizes(), denseStrides(values.sizes()), offset, alignment, values.numel(), values.options());
    out.copy_(values);
  }
  report->replayed = layoutOf(out);
  report->note = note;
  return out;
}

at::Tensor replicaOn(const at::Tensor& t, const at::Device& device) {
  const std::vector<int64_t> strides = t.strides().vec();
  std::optional<int64_t> span = spanOf(t.sizes(), strides);
  const int64_t item = static_cast<int64_t>(t.element_size());
  if (span && (*span - t.numel()) * item <= kMaxExtraBytes && t.storage_offset() * item <= kMaxExtraBytes) {
    at::Tensor out = placed(t.sizes(), strides, t.storage_offset(), pointerAlignment(t.data_ptr()), *span,
                            t.options().device(device));
    if (fillLayout(out, t.to(device))) return out;
  }
  return t.to(device).clone(at::MemoryFormat::Contiguous);
}

}  // namespace nanprov::replay
