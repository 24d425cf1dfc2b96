#include "base/records/call_event.h"

#include "base/interned_text.h"

namespace nanprov {

CallRecord CallEvent::record() const {
  CallRecord r;
  r.seq = seq;
  r.rank = rank;
  r.step = step;
  r.layer = layer;
  r.call = call;
  r.phase = phase;
  r.fwd_seq = fwd_seq;
  r.recompute = recompute;
  r.op = op;
  r.backend = backend;
  r.module = module;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.injected = injected;
  for (int role = 0; role < kRoleCount; ++role) {
    if (modified_roles & (1u << role))
      r.modified += (r.modified.empty() ? "" : ",") + std::string(roleName(static_cast<Role>(role)));
  }
  if (dropout_p >= 0) r.dropout_p = dropout_p;
  r.device = device;
  r.unattributed = unattributed;
  r.health = health;
  r.tensors.assign(tensors.begin(), tensors.end());
  return r;
}

CallEvent CallEvent::of(const CallRecord& r) {
  CallEvent e;
  e.seq = r.seq;
  e.rank = r.rank;
  e.step = r.step;
  e.layer = r.layer;
  e.call = r.call;
  e.phase = r.phase;
  e.fwd_seq = r.fwd_seq;
  e.recompute = r.recompute;
  e.op = internText(r.op);
  e.backend = internText(r.backend);
  e.module = internText(r.module);
  e.start_ns = r.start_ns;
  e.end_ns = r.end_ns;
  e.injected = internText(r.injected);
  for (size_t from = 0; from < r.modified.size();) {
    size_t to = r.modified.find(',', from);
    if (to == std::string::npos) to = r.modified.size();
    if (auto role = parseRole(std::string_view(r.modified).substr(from, to - from))) {
      e.modified_roles |= 1u << static_cast<int>(*role);
    }
    from = to + 1;
  }
  e.dropout_p = r.dropout_p.value_or(-1);
  e.device = r.device;
  e.unattributed = internText(r.unattributed);
  e.health = r.health;
  for (const TensorHealth& t : r.tensors) e.tensors.push_back(t);
  return e;
}

}  // namespace nanprov
