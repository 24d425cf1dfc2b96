// What repeats from call to call, stored once per rank store: a call's signature (op, backend,
// module, device, and per checked tensor its role, dtype, shape and element count, in the probe's
// order). A clean call then needs only a row of integers and one float32 max |x| per tensor, which
// is what keeps a store near 100 bytes a call (issue: 10M calls per rank).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/records/call_record.h"

namespace nanprov::store {

// The signature's text form, its identity in the store: "op\x1f backend\x1f module\x1f device\x1f tensors".
std::string signatureKey(const CallRecord& call);

// The tensors part: "role dtype shape numel" per tensor, ';'-separated ("Q float32 [2,4,16,8] 1024;...").
std::string tensorsDescription(const CallRecord& call);

// Tensors with role, dtype, shape and numel from a description, every count zero; an unreadable
// description gives an empty list.
std::vector<TensorHealth> tensorsFromDescription(const std::string& text);

// Whether a call is stored compactly (signature + max |x| per tensor): clean, no tensor all zero,
// no mask hiding whole rows, every max |x| a float32. Anything else keeps its full tensor rows.
bool storedCompactly(const CallRecord& call);

// Whether the signature's description can hold the call's tensors (no blank or ';' in their role,
// dtype or shape): then a call that is not stored compactly carries its tensors' health as a
// detail blob too, which readers use instead of its tensor rows.
bool describable(const CallRecord& call);

// Every count of each tensor (nan, posinf, neginf, masked_rows, max |x|, all zero), fixed-width
// little-endian, and back into tensors made from the description (false on a size mismatch).
std::string detailBlob(const CallRecord& call);
bool fillDetail(const void* blob, size_t bytes, std::vector<TensorHealth>& tensors);

// The max |x| of each tensor as little-endian float32s, and back (false on a size mismatch).
std::string maxAbsBlob(const CallRecord& call);
bool fillMaxAbs(const void* blob, size_t bytes, std::vector<TensorHealth>& tensors);

}  // namespace nanprov::store
