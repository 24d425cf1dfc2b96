// GradientSentinel: at every optimizer step, one check of all gradients and of the parameters
// after the update. It finds NaN/Inf that start outside attention (a loss term, a regulariser,
// an optimizer) at their true step, so they are not first seen one step later as an attention
// input.
//
// The bootstrap hands each optimizer's parameters over once (watch_parameters), so a step costs
// Python one call with two integers. On CUDA the tensors are read by MeasuredChecks::measure: dense
// ones 64 to a launch (the dense check), the rest twelve to a launch by the attention checks'
// fused kernel. The counts come back through mapped memory at later step boundaries: no host
// synchronisation, no copy, no event; what neither kernel can read (float64, more than 6 dims) is
// left unchecked rather than copied. On the
// CPU each tensor is scanned on the host by the checks' own bit-level pass (measureValues).
//
// Sharded parameters (FSDP2's DTensors) are checked on this rank's local shard, handed over by the
// bootstrap at each step with its gradient's: no collective, and named by the parameter's fully
// qualified name. The C++ side never reads a tensor subclass itself: a DTensor is a wrapper
// without storage (reading it as a plain tensor crashed the process), and any op on it would
// dispatch to Python and may start a collective.
//
// The parameters DDP replicates (watch's `replicated`) are also digested after each step
// (ReplicaDigests), for the report to compare across the ranks that replicate them; the digests
// go on whatever the sentinel found. The dense check that reads a parameter sums its words on the
// way (its digest); the rest are summed by ATen. A sharded parameter is digested only where its
// local shard is replicated (HSDP's replicate dimension), through that shard.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "probes/libtorch/measured_checks.h"
#include "probes/libtorch/replica_digests.h"

namespace nanprov::probes {

class Session;

class GradientSentinel final : public MeasuredSink {
 public:
  GradientSentinel(Session& session, MeasuredChecks& checks);
  // As above, the replica digests going to `digests` instead of the session (tests).
  GradientSentinel(Session& session, MeasuredChecks& checks, ReplicaDigests::Record digests)
      : session_(session), checks_(checks), replicas_(std::move(digests)) {}
  GradientSentinel(const GradientSentinel&) = delete;
  GradientSentinel& operator=(const GradientSentinel&) = delete;

  // The parameters an optimizer steps, `names` one line per parameter; replaces what `key` (the
  // optimizer's id) watched before. `sharded`: the positions of the parameters whose local shards
  // each check is given (in that order). `replicated`: the positions of the parameters (or
  // local shards) replicated over the global ranks `replica_ranks` (digested after each step).
  void watch(int64_t key, const std::vector<at::Tensor>& params, const std::string& names,
             const std::vector<int64_t>& sharded, const std::vector<int64_t>& replicated = {},
             const std::vector<int64_t>& replica_ranks = {});
  // Checks their gradients and their values after `step` (the step that produced the gradients).
  // `shards` holds, per sharded parameter, its local shard and its gradient's (undefined when it
  // has none). False when `key` is not watched (never was, or forgotten to bound memory).
  bool check(int64_t key, int64_t step, const std::vector<std::optional<at::Tensor>>& shards);
  // Records the replica digests the device finished (at every step boundary; waits at exit).
  void collectDigests(bool at_exit) { replicas_.collect(at_exit); }

 private:
  // The parameters one optimizer steps. Held weakly: the sentinel never keeps a model alive.
  struct Watched {
    std::vector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> params;
    std::vector<std::string> names;  // "param<i>" where the bootstrap knew none
    std::vector<bool> sharded;       // read from the check's local shards, never from the parameter
    std::vector<bool> replicated;    // digested after each step (a sharded one through its local shard)
    uint64_t order = 0;              // when it was watched, to forget the oldest first
  };
  // Which parameter, and which of its tensors, each count of one measured batch is.
  struct Slice {
    int64_t step = 0;
    std::shared_ptr<const Watched> watched;  // its names outlive the batch in flight
    int n = 0;
    std::array<std::pair<size_t, SentinelTensor>, MeasuredChecks::kMaxMeasuredDense> of{};
    // The replica digests this check sums: the place (in the step's digests, `digests`) of each
    // count that is one, or -1.
    uint64_t digests = 0;
    std::array<int32_t, MeasuredChecks::kMaxMeasuredDense> digest_place = filled(-1);
    static std::array<int32_t, MeasuredChecks::kMaxMeasuredDense> filled(int32_t v) {
      std::array<int32_t, MeasuredChecks::kMaxMeasuredDense> a;
      a.fill(v);
      return a;
    }
  };
  // One step's replicated parameters, by place in its digests (ReplicaDigests::open).
  struct Digesting {
    uint64_t id = 0;
    std::vector<int32_t> place_of;    // by parameter; -1: not digested
    std::vector<at::Tensor> tensors;  // by place: the parameter or its local shard
    std::vector<bool> by_check;       // by place: a dense check sums it
  };

  // The counts of a measure() this part asked for (MeasuredSink).
  void measured(uint64_t context, const MeasuredChecks::Counts* counts, int n) override;
  void submit(const std::vector<at::Tensor>& batch, Slice slice, int64_t step, std::shared_ptr<const Watched> watched);
  void forget(uint64_t context);  // a batch whose check will never call back
  void found(int64_t step, const std::string& parameter, SentinelTensor kind, double norm);
  Digesting openDigests(const Watched& w, int64_t step, const std::vector<std::optional<at::Tensor>>& shards);
  // Sums what no dense check took, by device.
  void sumDigests(const Digesting& d);

  Session& session_;
  MeasuredChecks& checks_;
  ReplicaDigests replicas_;
  std::mutex mu_;
  std::map<int64_t, std::shared_ptr<Watched>> watched_;  // by the bootstrap's key: the optimizer's id
  uint64_t next_order_ = 0;
  std::map<uint64_t, Slice> in_flight_;
  uint64_t next_context_ = 1;
  int64_t found_step_ = -1;
  size_t named_[2] = {0, 0};
};

}  // namespace nanprov::probes
