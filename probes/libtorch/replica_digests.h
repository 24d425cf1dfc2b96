// ReplicaDigests: after each optimizer step, a digest of every parameter DDP replicates, so the
// report can compare the ranks that should hold equal values (report/replica_check.h) and name
// the first step, rank and parameter that differ: finite silent corruption, a flipped bit, that
// no NaN check sees.
//
// A parameter's digest is the sum of its bytes read as 32-bit integers, wrapping (mod 2^32): one
// flipped bit in one element changes one word by ±2^k, k < 32, so the sum always changes (a sum
// of floats would not: rounding may hide it). It is computed by ATen ops on the parameter's own
// device, on its current stream (the one the optimizer stepped on): one reduction per parameter
// into int32 (no copy of the parameter), one stack, one copy into pinned memory. On CUDA the
// digests are read back at a later step boundary once an event says the copy finished (no host
// synchronisation), and waited for only at exit; on the CPU they are read at once.
//
// Measured on the H100 (docs/benchmarks.md, BENCH_DDP=1): 1.011x of a GPU-bound step, about 1 ms
// a step of the training thread in the per-parameter reductions. Not yet fused into the sentinel's
// dense check kernel (kernels/health_check.cu), which reads every parameter after the step
// already: that is what the 0.2% goal needs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace nanprov {

class Session;

class ReplicaDigests {
 public:
  explicit ReplicaDigests(Session& session) : session_(session) {}
  ReplicaDigests(const ReplicaDigests&) = delete;
  ReplicaDigests& operator=(const ReplicaDigests&) = delete;

  // Digests `params` (their values after `step`'s update), named `names` (same order; all on one
  // device). Recorded now on the CPU, at a later collect() on a GPU.
  void take(int64_t step, std::vector<std::string> names, const std::vector<at::Tensor>& params);
  // Records the digests whose device work finished; `at_exit`: waits for every one in flight.
  void collect(bool at_exit);

  // One parameter's digest: a 0-dim int32 tensor on its device (the header says what it sums).
  static at::Tensor digestOf(const at::Tensor& param);

 private:
  struct InFlight {
    int64_t step = 0;
    std::vector<std::string> names;
    at::Tensor host;  // pinned, int32, one per name
    // Made only for a device's digests: a CPU-only torch cannot make a CUDA event.
    std::unique_ptr<c10::Event> copied;
  };
  void record(int64_t step, const std::vector<std::string>& names, const at::Tensor& host);

  Session& session_;
  std::mutex mu_;
  std::deque<InFlight> in_flight_;  // in step order
};

}  // namespace nanprov
