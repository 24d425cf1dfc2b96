// GraphCheck: one attention call's health check captured into a CUDA graph. A graph's replays
// never pass through the dispatcher, so the check itself is made a node of the graph, right
// after the call's own kernels: every replay then checks that replay's tensors (their addresses
// are fixed in a graph) and publishes into a ring of host-mapped entries, one per replay
// (kernels/health_check.h, GraphRing). The host reads replay n's counts without a driver call.
// No LibTorch.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/health_check.h"

namespace nanprov::kernels {

// The id of the capture `stream` (a cudaStream_t) is part of; 0 when it is capturing nothing.
// Every stream joined to one capture (autograd's, a side stream) gives the same id.
uint64_t captureIdOf(void* stream);

class GraphCheck {
 public:
  // Captures the check of `views[0..count)` into the graph `stream` is capturing on `device`.
  // Its memory is allocated here, in relaxed capture mode for this thread (allocating does not
  // touch the captured stream), and zeroed by the host or inside the graph: nothing waits.
  static StatusOr<std::unique_ptr<GraphCheck>> capture(int device, const TensorView* views, int count, void* stream);
  ~GraphCheck();  // only once the graph can no longer run (freeing pinned memory waits for the device)
  GraphCheck(const GraphCheck&) = delete;
  GraphCheck& operator=(const GraphCheck&) = delete;

  enum class Replay {
    kPending,      // not run yet, or still publishing
    kDone,         // `out` holds its counts
    kOverwritten,  // kGraphRingEntries later replays ran before it was read: its counts are gone
  };
  // The counts of replay `n` (0 = the first replay since the capture) into out[0..count()).
  Replay read(uint64_t n, HealthCounts* out) const;
  // Replays whose check began publishing so far.
  uint64_t replaysRun() const;
  int count() const { return count_; }

 private:
  GraphCheck() = default;
  int device_ = 0;
  int count_ = 0;
  void* scratch_ = nullptr;    // device: a CheckScratch
  GraphRing* ring_ = nullptr;  // host view of the mapped ring
};

}  // namespace nanprov::kernels
