// ReplicaDigests: after each optimizer step, a digest of every parameter DDP replicates, so the
// report can compare the ranks that should hold equal values (report/replica_check.h) and name
// the first step, rank and parameter that differ: finite silent corruption, a flipped bit, that
// no NaN check sees.
//
// A parameter's digest is the sum of its bytes read as 32-bit integers, wrapping (mod 2^32): one
// flipped bit in one element changes one word by ±2^k, k < 32, so the sum always changes (a sum
// of floats would not: rounding may hide it). A tensor of 2-byte elements whose bytes are not
// whole words is summed element by element instead, each sign-extended.
//
// Two ways compute the same digest, with no host synchronisation:
// - the gradient sentinel's dense check (kernels/health_check.h), which reads every parameter
//   after the step already, sums its words on the way: no extra read and no extra launch
//   (digest());
// - an ATen reduction per parameter on its device, on its current stream (the one the optimizer
//   stepped on), for what that check does not read: CPU parameters, those not 16-byte aligned or
//   not whole words, and every parameter once the sentinel stopped at its first finding (sum()).
//   On a GPU they are copied to pinned memory and read at a later step boundary, once an event
//   says the copy finished; on the CPU at once.
// A step's digests are recorded together, in the model's order, once every one arrived: the store
// weighs them by place into that step's whole-model digest (store/replica_digest_rows.h), so a
// step missing one is not recorded at all (lost()), never recorded in part.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/records/replica_digest.h"

namespace nanprov::probes {

class ReplicaDigests {
 public:
  // Where the digests of the steps that settled go, each step's together (Session's
  // recordReplicaDigests, or a test's).
  using Record = std::function<void(std::vector<ReplicaDigestRecord>)>;
  explicit ReplicaDigests(Record record) : record_(std::move(record)) {}
  ReplicaDigests(const ReplicaDigests&) = delete;
  ReplicaDigests& operator=(const ReplicaDigests&) = delete;

  // Opens the digests of `step` (the values after its update) of the parameters `names`, in the
  // model's order: each place is then given by digest() or sum(). Returns the step's id.
  uint64_t open(int64_t step, std::vector<std::string> names);
  // The digest of place `place` of `id`, as the dense check summed it.
  void digest(uint64_t id, size_t place, uint32_t digest);
  // Digests `params` (places `places` of `id`, all on one device) with ATen.
  void sum(uint64_t id, const std::vector<size_t>& places, const std::vector<at::Tensor>& params);
  // A digest of `id` will never come (its dense check failed): the step is not recorded.
  void lost(uint64_t id);
  // Records the steps whose digests all arrived, taking the ATen sums the device finished;
  // `at_exit`: waits for every sum in flight, and drops the steps still waiting for a check.
  void collect(bool at_exit);

  // One parameter's digest: a 0-dim int32 tensor on its device (the header says what it sums).
  static at::Tensor digestOf(const at::Tensor& param);

 private:
  // ATen sums of some places of one step, on their way to the host.
  struct Sums {
    std::vector<size_t> places;
    at::Tensor host;                     // pinned (or CPU), int32, one per place
    std::unique_ptr<c10::Event> copied;  // null on the CPU: a CPU-only torch has no CUDA events
  };
  struct Step {
    uint64_t id = 0;
    int64_t step = 0;
    std::vector<std::string> names;
    std::vector<int32_t> digests;
    size_t missing = 0;  // places not yet given
    bool lost = false;
    std::vector<Sums> sums;  // in flight
  };
  Step* find(uint64_t id);                           // under mu_
  void give(Step& s, size_t place, int32_t digest);  // under mu_
  // Takes the steps ready to record (complete or lost) off the front; `wait`: waits for their sums.
  std::vector<Step> takeSettled(bool wait);

  Record record_;
  std::mutex mu_;
  std::deque<Step> steps_;  // in the order opened
  uint64_t next_id_ = 1;
};

}  // namespace nanprov::probes
