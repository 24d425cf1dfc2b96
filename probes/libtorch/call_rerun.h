// The first source edge's call run again where it ran, when it is captured: the same op, the same
// inputs, the same device, N times, before training goes on (issue 64). Only there are a library's
// own op (--probe-op, defined in the user's code) and the device's state at the failure both at
// hand; offline replay reruns what it can run again (replay/backend_reruns.h). Each rerun's
// outputs are compared with the run's: the same outputs non-finite (the failure recurred), and the
// same bits. Costs a few calls' time and one host sync, once per rank.
//
// Never changes the training: reruns run with gradients off and below the probes, on fresh copies
// of every argument the op writes; an ATen op without dropout draws nothing random. A library's
// own op (--probe-op) may keep state, so it is rerun only when `nanprov run --reruns` is given,
// and then the device's random generator is put back as it was. A
// call whose op nanprov cannot run again (attention written in plain ops, a module probe, a
// backward, which replay reruns from its capture) or that draws dropout says why it was not rerun.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/records/call_event.h"
#include "base/records/roles.h"
#include "probes/libtorch/call_args.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {

// What a probed op needs to be called again from what the probes held of one call: where each
// role and each other argument sits in its schema, and which role each result is.
struct RerunnableOp {
  c10::OperatorHandle handle;
  const AttentionOp* desc = nullptr;            // its roles' table row: the results' roles
  std::vector<std::pair<size_t, Role>> inputs;  // argument index → role
  std::vector<size_t> others;                   // argument indices of CallArgs, in their order
  size_t num_arguments = 0;
  std::optional<size_t> out_argument;  // an out buffer the op fills: O
  // A --probe-op: the user's own code, which may keep state (a counter, a cache, its own random
  // draws), so it is rerun only when asked (nanprov run --reruns N given).
  bool user_op = false;
};

// Called as each forward op is probed (installAttentionProbes, --probe-op); calls of it carry
// recipe.desc->name as CallEvent::op.
void registerRerunnableOp(RerunnableOp recipe);

struct CallReruns {
  int runs = 0;
  int reproduced = 0;     // reruns whose non-finite outputs were the run's
  int identical = 0;      // reruns bitwise identical to the run's outputs
  int distinct = 0;       // bitwise-distinct results among the reruns
  std::string not_rerun;  // why it was not rerun; empty when it was
};

// Runs the call `rec` (its tensors and arguments as held) `runs` times. `nonfinite_outputs` are
// the roles the run's outputs went non-finite in; `user_ops`: a --probe-op may be rerun.
CallReruns rerunCall(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, int runs,
                     const std::vector<std::string>& nonfinite_outputs, bool user_ops);

// The capture's metadata for it: reruns.runs, .reproduced, .identical, .distinct, or reruns.not_rerun.
void describeReruns(const CallReruns& reruns, std::map<std::string, std::string>& meta);

}  // namespace nanprov::probes
