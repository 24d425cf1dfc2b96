#include "base/records/call_health.h"

#include "base/records/roles.h"

namespace nanprov {

const char* edgeKindName(EdgeKind k) {
  switch (k) {
    case EdgeKind::kClean: return "clean";
    case EdgeKind::kSourceEdge: return "source";
    case EdgeKind::kPropagated: return "propagated";
  }
  return "?";
}

int64_t faultyValues(const TensorHealth& t, bool call_masks_rows) {
  bool neginf_legal = holdsMaskedRows(t.role) || (t.role == Role::kLSE && call_masks_rows);
  return t.nan + t.posinf + (neginf_legal ? 0 : t.neginf);
}

namespace {

// Calls `fault(t, is_output)` for every tensor of `call` (a CallRecord or a CallEvent) whose
// non-finite values count as a fault.
template <typename Call, typename Fault>
void forEachFault(const Call& call, Fault&& fault) {
  bool masks_rows = false;
  for (const TensorHealth& t : call.tensors) masks_rows = masks_rows || t.masked_rows > 0;
  for (const TensorHealth& t : call.tensors) {
    if (faultyValues(t, masks_rows) == 0) continue;
    fault(t, isOutputRole(call.phase, t.role));
  }
}

EdgeKind kindOf(bool bad_input, bool bad_output) {
  return bad_input ? EdgeKind::kPropagated : bad_output ? EdgeKind::kSourceEdge : EdgeKind::kClean;
}

template <typename Call>
EdgeKind kindOfCall(const Call& call) {
  bool bad_input = false, bad_output = false;
  forEachFault(call, [&](const TensorHealth&, bool output) { (output ? bad_output : bad_input) = true; });
  return kindOf(bad_input, bad_output);
}

}  // namespace

EdgeKind edgeKindOf(const CallRecord& call) { return kindOfCall(call); }
EdgeKind edgeKindOf(const CallEvent& call) { return kindOfCall(call); }

CallHealth classify(const CallRecord& call) {
  CallHealth h;
  forEachFault(call, [&](const TensorHealth& t, bool output) {
    (output ? h.nonfinite_outputs : h.nonfinite_inputs).push_back(roleName(t.role));
  });
  h.inputs_finite = h.nonfinite_inputs.empty();
  h.kind = kindOf(!h.inputs_finite, !h.nonfinite_outputs.empty());
  return h;
}

}  // namespace nanprov
