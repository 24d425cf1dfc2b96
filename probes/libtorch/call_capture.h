// Captures: every tensor of a checked call, its scalar arguments and where it ran, written as a
// safetensors file in <run>/captures/ for `nanprov replay` (store/capture_file.h). Which calls is
// the session's CapturePolicy. The training thread only copies the tensors to host memory; a
// background thread writes the file once the call's kernels are known (the next step boundary,
// or exit), and records a row in the store's captures table, written or skipped with the reason.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/records/call_record.h"
#include "probes/core/capture_writer.h"
#include "probes/libtorch/call_args.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {

class Session;

class Captures {
 public:
  explicit Captures(Session& session) : session_(session), writer_(session) {}
  Captures(const Captures&) = delete;
  Captures& operator=(const Captures&) = delete;

  // Called once `rec`'s health is known, with the tensors it describes. `tensors` is empty when
  // they were not held until then; a call the policy wants is then recorded as skipped.
  // `missing` says why `tensors` is empty when they were never held (a CUDA graph's replay).
  void offer(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, const char* missing = nullptr);

  // At a step boundary, with the kernels collected since the last one: names the kernels of the
  // captures waiting for them and hands those to the writer thread. At exit it also waits for
  // every file to be written.
  void release(const std::vector<KernelRecord>& kernels, bool at_exit);

 private:
  // offer() and release() without their guard: an exception stops at the guard, never the training.
  void offerGuarded(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, const char* missing);
  void releaseGuarded(const std::vector<KernelRecord>& kernels, bool at_exit);
  // Why the audit took a call, for its capture's metadata (the judge and replay read it).
  struct AuditReason {
    std::string regime_change;  // the conditions that changed, when that is why
    bool by_rotation = false;   // the rotation's: its judging is charged to --audit-budget
  };
  void take(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, CaptureTrigger trigger,
            std::optional<uint64_t> key, const AuditReason& reason);
  // The first source edge run again where it ran (call_rerun.h), said in the capture's metadata.
  void rerunEdge(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, store::CaptureFile& file);
  static void describe(const CallRecord& rec, const RoleTensors& tensors, const CallArgs& args,
                       store::CaptureFile& file);
  // offset.ROLE and align.ROLE: each captured tensor's storage offset and data-pointer alignment in the run.
  static void describeLayout(const RoleTensors& run_tensors, store::CaptureFile& file);

  Session& session_;
  std::mutex mu_;
  std::vector<CaptureJob> waiting_;  // CUDA captures waiting for their kernels' names
  // Device-to-host copies made for captures: each waited for the GPU once, on the training
  // thread (not counted in host_syncs, which is about the checks).
  int64_t device_copies_ = 0;
  std::map<int64_t, std::vector<KernelRecord>> recent_;
  CaptureWriter writer_;
};

// Where the training runs and with what: the torch nanprov was built for and, on a CUDA device,
// the CUDA runtime, cuDNN and the GPU ("NVIDIA H200 (sm_90)"), and on every device the facts the
// bootstrap read (run_facts.h: CUDA build, loaded cuDNN, Triton, ptxas, FA4). Captures carry it, for replay and
// bug reports without the run; the store's meta carries it for the report's known-issue matcher.
std::map<std::string, std::string> environmentOf(const Device& device);

}  // namespace nanprov::probes
