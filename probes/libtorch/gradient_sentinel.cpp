#include "probes/libtorch/gradient_sentinel.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "base/log_once.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {
namespace {

// A finding names at most this many parameters per kind: enough to point at the culprit
// without writing a whole model's names when everything has gone NaN.
constexpr size_t kMaxNamed = 64;
// Optimizers watched at once. A loop that makes a new optimizer every step would otherwise grow
// the table without bound; a forgotten one is watched again on its next step (check_step's false).
constexpr size_t kMaxWatched = 64;

}  // namespace

GradientSentinel::GradientSentinel(Session& session, MeasuredChecks& checks)
    : GradientSentinel(session, checks, [&session](std::vector<ReplicaDigestRecord> digests) {
        session.recordReplicaDigests(std::move(digests));
      }) {}

void GradientSentinel::watch(int64_t key, const std::vector<at::Tensor>& params, const std::string& names,
                             const std::vector<int64_t>& sharded, const std::vector<int64_t>& replicated,
                             const std::vector<int64_t>& replica_ranks) {
  auto w = std::make_shared<Watched>();
  for (const at::Tensor& p : params) w->params.emplace_back(p.getIntrusivePtr());
  auto positions = [&](const std::vector<int64_t>& of) {
    std::vector<bool> at(params.size(), false);
    for (int64_t i : of) {
      if (i >= 0 && static_cast<size_t>(i) < params.size()) at[static_cast<size_t>(i)] = true;
    }
    return at;
  };
  w->sharded = positions(sharded);
  w->replicated = positions(replicated);
  // What the report compares: the ranks that replicate this rank's parameters (or, for HSDP, its
  // local shards), and whether some parameters are sharded and replicated nowhere (never compared).
  if (std::count(w->replicated.begin(), w->replicated.end(), true) > 0 && !replica_ranks.empty()) {
    std::string group;
    for (int64_t r : replica_ranks) group += (group.empty() ? "" : ",") + std::to_string(r);
    session_.setMeta(kReplicaGroupMeta, group);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (w->sharded[i] && !w->replicated[i]) {
      session_.setMeta(kReplicaShardedMeta, "1");
      break;
    }
  }
  size_t from = 0;
  while (w->names.size() < params.size()) {
    size_t end = std::min(names.find('\n', from), names.size());
    w->names.push_back(from < names.size() ? names.substr(from, end - from) : std::string());
    from = end + 1;
  }
  for (size_t i = 0; i < w->names.size(); ++i) {
    if (w->names[i].empty()) w->names[i] = "param" + std::to_string(i);
  }
  std::lock_guard<std::mutex> lock(mu_);
  w->order = next_order_++;
  watched_[key] = std::move(w);
  if (watched_.size() > kMaxWatched) {
    auto oldest = watched_.begin();
    for (auto it = watched_.begin(); it != watched_.end(); ++it) {
      if (it->second->order < oldest->second->order) oldest = it;
    }
    watched_.erase(oldest);
  }
}

bool GradientSentinel::check(int64_t key, int64_t step, const std::vector<std::optional<at::Tensor>>& shards) {
  ProbeCost::Scope cost(ProbeStage::kSentinel);
  std::shared_ptr<const Watched> w;
  bool past_first_finding = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = watched_.find(key);
    if (it == watched_.end()) return false;
    w = it->second;
    past_first_finding = found_step_ >= 0 && step > found_step_;  // the first non-finite step is what the report needs
  }
  const size_t sharded_count = static_cast<size_t>(std::count(w->sharded.begin(), w->sharded.end(), true));
  const bool shards_match = shards.size() == 2 * sharded_count;
  if (!shards_match) {
    logOnce("sentinel shards",
            "gradient sentinel: the local shards handed over do not match the sharded parameters; "
            "sharded parameters are not checked");
  }
  // Every step: a replica may diverge after the values went non-finite.
  Digesting digesting = openDigests(*w, step, shards_match ? shards : std::vector<std::optional<at::Tensor>>{});
  if (past_first_finding) {
    sumDigests(digesting);
    return true;
  }
  // Gradients and parameters by device: the CPU's scanned on the host, each GPU's in batches,
  // dense tensors apart from the rest (a dense check takes 64, a fused one 12).
  std::vector<at::Tensor> cpu;
  std::vector<std::pair<size_t, SentinelTensor>> cpu_of;
  struct Batch {
    std::vector<at::Tensor> tensors;
    Slice slice;
    int most = 0;  // tensors a measure() takes (MeasuredChecks::denseBatch, or kMaxMeasured)
  };
  std::map<std::pair<int, bool>, Batch> cuda;  // by (device, dense)
  auto add = [&](const at::Tensor& t, size_t param, SentinelTensor kind) {
    if (t.is_cpu()) {
      cpu.push_back(t);
      cpu_of.emplace_back(param, kind);
      return;
    }
    // What neither kernel can read would cost a copy to the host every step: not checked.
    const auto type = t.scalar_type();
    const bool dense = MeasuredChecks::denseCheckable(t);
    if (!dense && (!t.is_cuda() || t.dim() > 6 || (type != at::kFloat && type != at::kHalf && type != at::kBFloat16))) {
      logOnce("sentinel unreadable",
              "gradient sentinel: parameters that are not float32/float16/bfloat16 CUDA tensors "
              "of at most 6 dims are not checked (reading them would synchronise every step)");
      return;
    }
    Batch& batch = cuda[{t.device().index(), dense}];
    if (batch.tensors.empty()) {
      batch.most = dense ? checks_.denseBatch(t.device().index()) : MeasuredChecks::kMaxMeasured;
      batch.tensors.reserve(static_cast<size_t>(batch.most));
    }
    // A replicated parameter's digest comes with its dense check, where that check sums its words.
    const int32_t place = kind == SentinelTensor::kParam ? digesting.place_of[param] : -1;
    if (place >= 0 && dense && batch.most == MeasuredChecks::kMaxMeasuredDense && MeasuredChecks::wordSummable(t) &&
        digesting.tensors[static_cast<size_t>(place)].is_same(t)) {
      batch.slice.digests = digesting.id;
      batch.slice.digest_place[static_cast<size_t>(batch.slice.n)] = place;
      digesting.by_check[static_cast<size_t>(place)] = true;
    }
    batch.tensors.push_back(t);
    batch.slice.of[static_cast<size_t>(batch.slice.n++)] = {param, kind};
    if (batch.slice.n == batch.most) {
      submit(batch.tensors, std::move(batch.slice), step, w);
      batch = Batch{};
    }
  };
  // A tensor subclass (a DTensor, a float8 wrapper) is read only through the local shard the
  // bootstrap hands over: its own TensorImpl may have no storage to read.
  auto readable = [](const at::Tensor& t) {
    return t.defined() && !t.unsafeGetTensorImpl()->is_python_dispatch() && !t.is_sparse() && t.is_floating_point();
  };
  size_t shard = 0;
  for (size_t i = 0; i < w->params.size(); ++i) {
    at::Tensor p, g;
    if (w->sharded[i]) {
      if (!shards_match) continue;
      p = shards[2 * shard].value_or(at::Tensor());
      g = shards[2 * shard + 1].value_or(at::Tensor());
      ++shard;
    } else {
      c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl = w->params[i].lock();
      if (!impl) continue;
      p = at::Tensor(std::move(impl));
      g = p.grad();
    }
    if (!g.defined()) continue;
    if (!readable(g) || !readable(p)) {
      if (p.unsafeGetTensorImpl()->is_python_dispatch() || g.unsafeGetTensorImpl()->is_python_dispatch()) {
        logOnce("sentinel subclass",
                "gradient sentinel: parameters of a tensor subclass without a local shard are not checked");
      }
      continue;
    }
    add(g, i, SentinelTensor::kGrad);
    add(p, i, SentinelTensor::kParam);
  }
  for (auto& [where, batch] : cuda) {
    if (batch.slice.n > 0) submit(batch.tensors, std::move(batch.slice), step, w);
  }
  sumDigests(digesting);
  // On the CPU the checks' own host scan, which reads each tensor once through its bits: ATen's
  // infinity-norm reduction is not vectorised there and cost a tenth of a small model's step.
  for (size_t i = 0; i < cpu.size(); ++i) {
    const TensorHealth h = measureValues(cpu[i]);
    if (h.nonfinite() == 0) continue;
    const double norm = h.nan ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    found(step, w->names[cpu_of[i].first], cpu_of[i].second, norm);
  }
  return true;
}

// The replicated parameters' values after `step`, each given a place in the step's digests. A
// sharded one (HSDP: sharded within a node, replicated across) is digested through its local
// shard, which is what its replicas hold equal; `shards` is empty when they did not match.
GradientSentinel::Digesting GradientSentinel::openDigests(const Watched& w, int64_t step,
                                                          const std::vector<std::optional<at::Tensor>>& shards) {
  Digesting d;
  d.place_of.assign(w.params.size(), -1);
  std::vector<std::string> names;
  size_t shard = 0;
  for (size_t i = 0; i < w.params.size(); ++i) {
    const size_t local = w.sharded[i] ? shard++ : 0;
    if (!w.replicated[i]) continue;
    at::Tensor p;
    if (w.sharded[i]) {
      if (2 * local >= shards.size()) continue;
      p = shards[2 * local].value_or(at::Tensor());
    } else if (c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl = w.params[i].lock()) {
      p = at::Tensor(std::move(impl));
    }
    if (!p.defined() || p.unsafeGetTensorImpl()->is_python_dispatch() || p.is_sparse() || !p.has_storage()) continue;
    d.place_of[i] = static_cast<int32_t>(d.tensors.size());
    names.push_back(w.names[i]);
    d.tensors.push_back(std::move(p));
  }
  d.by_check.assign(d.tensors.size(), false);
  d.id = replicas_.open(step, std::move(names));
  return d;
}

void GradientSentinel::sumDigests(const Digesting& d) {
  std::map<std::pair<int, int>, std::pair<std::vector<size_t>, std::vector<at::Tensor>>> by_device;  // (type, index)
  for (size_t place = 0; place < d.tensors.size(); ++place) {
    if (d.by_check[place]) continue;
    const at::Tensor& p = d.tensors[place];
    auto& [places, params] = by_device[{static_cast<int>(p.device().type()), p.device().index()}];
    places.push_back(place);
    params.push_back(p);
  }
  for (auto& [device, batch] : by_device) replicas_.sum(d.id, batch.first, batch.second);
}

void GradientSentinel::measured(uint64_t context, const MeasuredChecks::Counts* counts, int n) {
  Slice slice;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(context);
    if (it == in_flight_.end()) return;
    slice = std::move(it->second);
    in_flight_.erase(it);
  }
  if (n != slice.n) {
    logOnce("sentinel device", "a gradient sentinel check failed on the device; that step's gradients are not judged");
    if (slice.digests) replicas_.lost(slice.digests);
    return;
  }
  for (int i = 0; i < n; ++i) {
    const MeasuredChecks::Counts& c = counts[i];
    if (const int32_t place = slice.digest_place[static_cast<size_t>(i)]; place >= 0) {
      // Measured some other way (the dense check failed at launch): no digest came with it.
      if (c.word_summed) replicas_.digest(slice.digests, static_cast<size_t>(place), c.word_sum);
      else replicas_.lost(slice.digests);
    }
    if (c.nan + c.posinf + c.neginf == 0) continue;
    const double norm = c.nan ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    const auto& [param, kind] = slice.of[static_cast<size_t>(i)];
    found(slice.step, slice.watched->names[param], kind, norm);
  }
}

void GradientSentinel::submit(const std::vector<at::Tensor>& batch, Slice slice, int64_t step,
                              std::shared_ptr<const Watched> watched) {
  slice.step = step;
  slice.watched = std::move(watched);
  uint64_t context;
  {
    std::lock_guard<std::mutex> lock(mu_);
    context = next_context_++;
    in_flight_.emplace(context, std::move(slice));
  }
  bool pending = false;
  try {
    pending = checks_.measure(batch, *this, context);
  } catch (...) {
    forget(context);
    throw;
  }
  if (!pending) forget(context);
}

void GradientSentinel::forget(uint64_t context) {
  uint64_t digests = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(context);
    if (it == in_flight_.end()) return;
    digests = it->second.digests;
    in_flight_.erase(it);
  }
  if (digests) replicas_.lost(digests);
}

// Records one non-finite tensor of `step`, unless an earlier step already had one. Results do not
// arrive in step order (the CPU's at once, each GPU's at a later poll), so an earlier step found
// later starts the count again; readers take the earliest step the store holds.
void GradientSentinel::found(int64_t step, const std::string& parameter, SentinelTensor kind, double norm) {
  size_t named;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (found_step_ >= 0 && step > found_step_) return;
    if (step != found_step_) {
      found_step_ = step;
      named_[0] = named_[1] = 0;
    }
    named = ++named_[static_cast<int>(kind)];
  }
  RunCounters counted;
  (kind == SentinelTensor::kGrad ? counted.sentinel_nonfinite_grads : counted.sentinel_nonfinite_params) =
      static_cast<int64_t>(named);
  session_.setCounters(counted);
  if (named > kMaxNamed) return;
  SentinelRecord f;
  f.step = step;
  f.tensor = kind;
  f.parameter = parameter;
  f.norm = norm;
  session_.recordSentinel({std::move(f)});
}

}  // namespace nanprov::probes
