// CallEvent: one attention call as the probes hold it on the training thread, in plain values
// only: enums, integers, pointers to text that lives as long as the process, and the tensors'
// health inline. Making one allocates nothing; the store's writer thread turns it into the
// CallRecord that readers see (strings and all), off the training's time.
#pragma once

#include <cstdint>

#include "base/inline_vector.h"
#include "base/records/call_record.h"
#include "base/records/role.h"

namespace nanprov {

// One tensor per role, and room for an op probed with --probe-op that repeats one.
inline constexpr size_t kMaxCallTensors = kRoleCount + 2;
using CallTensors = InlineVector<TensorHealth, kMaxCallTensors>;

struct CallEvent {
  int64_t seq = 0;
  int rank = 0;
  int64_t step = 0;
  int64_t layer = -1;
  int64_t call = 0;
  Phase phase = Phase::kForward;
  int64_t fwd_seq = -1;
  bool recompute = false;
  // The texts below are static (the probed op's table, role names) or interned
  // (base/interned_text.h): never freed, so the event can cross threads as it is.
  const char* op = "";
  const char* backend = "";
  const char* module = "";
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  const char* injected = "";    // a role name; "" when nothing was injected
  uint32_t modified_roles = 0;  // bit 1 << Role of each tensor changed before its deferred check
  double dropout_p = -1;        // CallRecord::dropout_p; negative when nothing says
  // Ran inside a torch.compile'd graph (its forward, or its backward): Inductor reuses a dead
  // buffer by writing into it with its own kernels, which bump no version counter, so the probes
  // check such a call at once, never deferred. Not stored.
  bool compiled = false;
  Device device;
  const char* unattributed = "";  // why its kernels are not known; "" when they are
  int health = 0;                 // EdgeKind, set where the tensors' health is complete
  CallTensors tensors;

  // The store's form. Fields mean what CallRecord's of the same name mean.
  CallRecord record() const;
  // The event of a record made elsewhere (tests, the store benchmark): its texts interned.
  static CallEvent of(const CallRecord& record);
};

}  // namespace nanprov
