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
  bool neginf_legal = t.role == "mask" || (t.role == "LSE" && call_masks_rows);
  return t.nan + t.posinf + (neginf_legal ? 0 : t.neginf);
}

EdgeKind edgeKindOf(const CallRecord& call) {
  bool masks_rows = false, bad_output = false;
  for (const TensorHealth& t : call.tensors) masks_rows = masks_rows || t.masked_rows > 0;
  for (const TensorHealth& t : call.tensors) {
    if (faultyValues(t, masks_rows) == 0) continue;
    auto role = parseRole(t.role);
    if (!(role && isOutputRole(call.phase, *role))) return EdgeKind::kPropagated;
    bad_output = true;
  }
  return bad_output ? EdgeKind::kSourceEdge : EdgeKind::kClean;
}

CallHealth classify(const CallRecord& call) {
  bool masks_rows = false;
  for (const TensorHealth& t : call.tensors) masks_rows = masks_rows || t.masked_rows > 0;
  CallHealth h;
  for (const TensorHealth& t : call.tensors) {
    if (faultyValues(t, masks_rows) == 0) continue;
    auto role = parseRole(t.role);
    bool output = role && isOutputRole(call.phase, *role);
    (output ? h.nonfinite_outputs : h.nonfinite_inputs).push_back(t.role);
  }
  h.inputs_finite = h.nonfinite_inputs.empty();
  if (!h.inputs_finite) h.kind = EdgeKind::kPropagated;
  else if (!h.nonfinite_outputs.empty()) h.kind = EdgeKind::kSourceEdge;
  return h;
}

}  // namespace nanprov
