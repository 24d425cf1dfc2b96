// GraphChecks: attention inside CUDA graphs, checked at every replay. A graph's replays never
// pass through the dispatcher, so while a graph is captured each probed call's check is captured
// into it (kernels::GraphCheck) and the call's record is kept as the pattern of its replays. The
// bootstrap (nanprov_boot/cuda_graphs.py) says which graph each capture is, from
// torch.cuda.CUDAGraph.capture_begin, and when a graph is replayed: each replay names its calls
// then, in the step it runs in, and their records are completed from the checks' rings once that
// replay published, read from mapped memory without a host synchronisation.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/inline_vector.h"
#include "base/records/call_event.h"
#include "kernels/health_check.h"
#include "probes/libtorch/check_views.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::probes {

class CapturedCheck;
class CheckedCallSink;
class Session;

class GraphChecks {
 public:
  // Replays are named in `session`, their records go to `sink`; `tracer` is kept attached while
  // graphs may replay (CUPTI detached under a replay faults it).
  GraphChecks(Session& session, KernelTracer& tracer, CheckedCallSink& sink);
  ~GraphChecks();
  GraphChecks(const GraphChecks&) = delete;
  GraphChecks& operator=(const GraphChecks&) = delete;

  // rec.tensors index of each view the kernel reads.
  using Checked = CheckedTensors;

  // The bootstrap: graph `key` began capturing on `stream` (a cudaStream_t).
  void captureBegan(int64_t key, void* stream);
  // `stream` is capturing a graph: captures the check of `views` into it, with `rec` (its tensors
  // described, rec.tensors[checked[i]] read by views[i]) as the pattern of every replay's record.
  // Returns "" when captured, else why not: the caller counts the call unprobed.
  std::string capture(const CallEvent& rec, const Checked& checked, const kernels::TensorView* views, int count,
                      int device, void* stream);
  // The bootstrap: graph `key` is about to be replayed, in the current step.
  void replayed(int64_t key);
  // The bootstrap: graph `key` was reset; its checks never run again.
  void reset(int64_t key);

  // The bootstrap: this thread runs code whose allocations go to a CUDA graph's private memory
  // pool (torch.compile's cudagraph trees warm a graph's code up eagerly in it), or left it.
  // Tensors of calls checked meanwhile are not held past their call: cudagraph trees stops the
  // training when an allocation in its pool is alive that it did not hand out.
  static void enterGraphPool(bool entering);
  static bool inGraphPool();

  using Clock = std::chrono::steady_clock;
  // Records every replay whose checks published; never waits for the GPU. Replays still running
  // stay for a later poll.
  void poll();
  // At exit: as poll(), waiting for the replays still running until `deadline`; what is
  // unfinished then is dropped and counted in `*unfinished`.
  void drain(Clock::time_point deadline, int* unfinished);

  // Checks captured into graphs over the run, at most kMaxChecks: their memory is kept for the
  // process (freeing pinned memory would wait for the device).
  static constexpr int kMaxChecks = 4096;

 private:
  struct Captured;
  struct Graph;
  // A replay's name for one captured check: what differs from the pattern.
  struct Name {
    int64_t seq = 0, step = 0, call = 0, fwd_seq = -1;
    int64_t at_ns = 0;  // when the replay was launched
  };
  struct Finished {
    std::vector<CallEvent> records;
    int64_t lost = 0;  // replays whose counts were overwritten before they were read
  };
  void collectLocked(Finished& done, bool waiting, int* unfinished);
  void recordOutsideLock(Finished& done);

  Session& session_;
  KernelTracer& tracer_;
  CheckedCallSink& sink_;
  std::mutex mu_;
  std::map<int64_t, Graph> graphs_;                        // by the bootstrap's key
  std::unordered_map<uint64_t, int64_t> keys_;             // CUDA capture id -> key
  std::unordered_map<int64_t, int64_t> replayed_forward_;  // a captured forward's seq -> its latest replay's
  std::vector<std::unique_ptr<CapturedCheck>> retired_;    // checks of reset graphs, kept (see kMaxChecks)
  int64_t captured_ = 0;
};

}  // namespace nanprov::probes
