// CheckedCallSink: where a checked call goes once its tensors' health is known. The checks
// (DeviceChecks, GraphChecks) are handed one by their owner (Probes gives its CallRecorder, which
// offers the call for capture and stores it), so a check finishing on a polling thread never looks
// for the process's probes.
#pragma once

#include <utility>

#include "base/records/call_event.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {

class CheckedCallSink {
 public:
  // `rec` with its tensors' health filled in; `tensors` are the call's own, held until now, or
  // empty, with `missing` saying why when it is not the hold budget (Captures::offer).
  void record(CallEvent rec, const RoleTensors& tensors, const CallArgs& args, const char* missing = nullptr) {
    recordChecked(std::move(rec), tensors, args, missing);
  }

 protected:
  ~CheckedCallSink() = default;  // not owned through this interface

 private:
  virtual void recordChecked(CallEvent rec, const RoleTensors& tensors, const CallArgs& args, const char* missing) = 0;
};

}  // namespace nanprov::probes
