// CollectiveChecks: the collectives that carry tensors between ranks (c10d::allreduce_, the
// reduce-scatters, all-gathers, broadcast_, alltoall and their coalesced forms: DDP's gradient
// buckets, FSDP2's all-gathers and reduce-scatters), checked at the dispatcher as attention is
// (collective_probe.h wraps the ops): each op's input before it runs, its output once it
// completed. A rank whose values went non-finite only through a collective is then named by that
// collective and the ranks it came from, never "outside attention".
//
// No host synchronisation, nothing waits. The input is read on the caller's current stream before
// the op is issued: a backend's collective stream waits on that stream (NCCL), so the check reads
// the value the collective sends. The output is read in a callback on the op's Work future:
// ProcessGroupNCCL completes its future as it enqueues, with events on its stream, and the future
// runs the callback on a stream that waits on them (recording the outputs' storages there for
// the caching allocator); gloo runs it on its worker thread once the values arrived. CUDA tensors
// go through MeasuredChecks::measure (counts back at a later poll), CPU tensors are scanned at once,
// as the gradient sentinel does.
//
// The store gets a row only for a collective that carried a non-finite value (a few per run:
// the first steps that had one), and meta collectives_checked counts them all.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/records/collective_record.h"
#include "probes/libtorch/measured_checks.h"

namespace nanprov::probes {

class Session;

class CollectiveChecks final : public MeasuredSink {
 public:
  CollectiveChecks(Session& session, MeasuredChecks& checks) : session_(session), checks_(checks) {}
  CollectiveChecks(const CollectiveChecks&) = delete;
  CollectiveChecks& operator=(const CollectiveChecks&) = delete;

  // A collective is about to be issued: `inputs` are measured now (none: its input is not
  // meaningful on this rank, e.g. a broadcast's receive buffer). Returns its id for complete().
  // `op` must outlive the process (the probed ops' table).
  uint64_t begin(const char* op, const std::string& group, int64_t group_size, const std::vector<at::Tensor>& inputs);
  // It completed (on the device: the caller's current stream is ordered after it); `outputs` are
  // measured. Empty when its output cannot be read: the collective is then judged on its input.
  void complete(uint64_t id, const std::vector<at::Tensor>& outputs);

  int64_t checked() const { return checked_.load(std::memory_order_relaxed); }

 private:
  struct Open {
    CollectiveRecord rec;
    int waiting = 0;         // measures in flight
    bool completed = false;  // complete() ran: no more measures will come
  };

  void submit(uint64_t id, bool output, const std::vector<at::Tensor>& tensors);
  // The counts of a measure() this part asked for (MeasuredSink).
  void measured(uint64_t context, const MeasuredChecks::Counts* counts, int n) override;
  // Under mu_: takes the collective out once nothing more will arrive; the caller records it.
  bool takeIfDone(std::map<uint64_t, Open>::iterator it, CollectiveRecord* out);
  void recordIfNotClean(const CollectiveRecord& rec);

  Session& session_;
  MeasuredChecks& checks_;
  std::mutex mu_;
  std::map<uint64_t, Open> open_;
  uint64_t next_id_ = 1;
  // Per process group: the step its last collective ran in and its ordinal there. Ranks issue a
  // group's collectives in one order, so (group, step, ordinal) is one collective on every rank.
  std::map<std::string, std::pair<int64_t, int64_t>> ordinals_;
  int64_t recorded_ = 0;
  std::atomic<int64_t> checked_{0};
};

}  // namespace nanprov::probes
