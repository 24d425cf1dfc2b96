// The alignment of a data pointer as captures record it and replay rebuilds it: the largest power
// of two dividing the address, capped at 256 (no kernel nanprov knows asks for more; CUDA's
// allocator hands out 512-byte aligned blocks, so a view's offset decides everything below that).
#pragma once

#include <cstdint>

namespace nanprov {

inline constexpr int64_t kAlignmentCap = 256;

inline int64_t pointerAlignment(uintptr_t address) {
  int64_t align = 1;
  while (align < kAlignmentCap && address % static_cast<uintptr_t>(align * 2) == 0) align *= 2;
  return align;
}

inline int64_t pointerAlignment(const void* p) { return pointerAlignment(reinterpret_cast<uintptr_t>(p)); }

}  // namespace nanprov
