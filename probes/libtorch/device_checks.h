// DeviceChecks: the health checks of attention calls, asynchronous on CUDA. Each call's tensors
// are measured by one fused kernel on the call's own stream, right after the op; the record
// reaches the store once the results are back, collected without waiting at later calls and step
// boundaries. The parts, each in its own file:
//   - check_lanes.h: each thread's queue of checks on each device, and what comes back from it;
//   - held_tensors.h: the tensors held until their results are known, within NANPROV_HOLD_BYTES;
//     beyond it they are released early and the caching allocator is told the check still reads
//     them, so their memory is not reused under it;
//   - deferred_calls.h: calls batched into one launch (NANPROV_DEFER_CHECKS), and what stays
//     immediate;
//   - measured_checks.h: tensors measured for the sentinel, the trail and the collectives;
//   - forward_checks.h: what each forward's check read, which its backward then does not read again;
//   - graph_checks.h: checks captured into CUDA graphs, recorded at each replay.
// Built without the CUDA toolkit, or where a device's queue cannot be made (device_queue.h),
// every tensor is measured on the host (a counted host sync). This class is their façade: the
// immediate check of a call, and the step boundary's and exit's collection.
#pragma once

#include <cstdint>
#include <optional>

#include "base/records/call_event.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/check_lanes.h"
#include "probes/libtorch/checked_call_sink.h"
#include "probes/libtorch/deferred_calls.h"
#include "probes/libtorch/device_queue.h"
#include "probes/libtorch/forward_checks.h"
#include "probes/libtorch/graph_checks.h"
#include "probes/libtorch/held_tensors.h"
#include "probes/libtorch/measured_checks.h"
#include "probes/libtorch/tensor_health.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::probes {

class Session;

class DeviceChecks {
 public:
  // Checked calls go to `sink` (CallRecorder) once their health is known, from the thread that
  // collects them; what could not be checked is counted in `session`. `tracer` is GraphChecks'.
  // Each lane's queue is made by `make_queue` (DeviceQueue::create; a fake in tests).
  DeviceChecks(Session& session, KernelTracer& tracer, CheckedCallSink& sink,
               DeviceQueueFactory make_queue = &DeviceQueue::create);
  DeviceChecks(const DeviceChecks&) = delete;
  DeviceChecks& operator=(const DeviceChecks&) = delete;

  // Checks `tensors` (all on the CUDA device rec.device) and records `rec` with their health once known,
  // offering it for capture with `args` (CheckedCallSink). What the fused kernel cannot read
  // (float64, more than 6 dims) is measured synchronously, and counted as a host synchronisation.
  void submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  // A CPU call's tensors: deferred to its thread's batch as a CUDA call's are, or measured now.
  void submitHost(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  // Launches (on CUDA) or measures (on the CPU) every thread's deferred calls. poll() and drain()
  // begin with it; never waits for the GPU.
  void flushDeferred() { deferred_.flush(); }
  DeferStats deferStats() const { return deferred_.stats(); }
  int deferMode() const { return deferred_.mode(); }  // NANPROV_DEFER_CHECKS: 0, 1 (CUDA calls), 2 (CPU calls too)

  // Tensors measured for the gradient sentinel, the module trail and the collectives' checks.
  MeasuredChecks& measured() { return measured_; }

  void poll();  // records every finished check; never waits for the GPU (it may wait its turn behind another collector)
  // Waits for every check in flight (exit only), at most NANPROV_EXIT_WAIT_SECONDS (30): what is
  // unfinished then is dropped, and said.
  void drain();

  int64_t hostSyncs() const { return lanes_.hostSyncs(); }  // synchronisations nanprov added (fallbacks, full queues)
  // measure()'s launches so far: dense checks, and fused checks of measured tensors.
  int64_t denseLaunches() const { return measured_.denseLaunches(); }
  int64_t measuredFusedLaunches() const { return measured_.fusedLaunches(); }
  // Held tensors released so far, and how many storages their release freed: the caching
  // allocator's frees, which autograd would have made without nanprov.
  int64_t released() const { return held_.released(); }
  int64_t releasedLast() const { return held_.releasedLast(); }
  // Tensors of backward calls whose counts came from their forward's check, not read again.
  int64_t inherited() const { return forwards_.inherited(); }
  int firstDevice() const { return lanes_.firstDevice(); }  // the lowest CUDA device checks ran on; -1 while none has
  // Checks captured into CUDA graphs, recorded at each replay (collected by poll() and drain()).
  GraphChecks& graphs() { return graphs_; }
  // The bootstrap: graph `key` began capturing on the current stream of the current CUDA device.
  void graphCaptureBegan(int64_t key);

 private:
  Session& session_;
  CheckedCallSink& sink_;
  HeldTensors held_;
  ForwardChecks forwards_;
  CheckLanes lanes_;
  GraphChecks graphs_;
  DeferredCalls deferred_;
  MeasuredChecks measured_;
};

}  // namespace nanprov::probes
