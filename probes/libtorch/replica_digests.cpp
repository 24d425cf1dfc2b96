#include "probes/libtorch/replica_digests.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <utility>

#include "base/log_once.h"

namespace nanprov::probes {
namespace {

// Steps whose digests are still on their way: past this many, the oldest one's sums are waited
// for, and, when it still lacks a dense check's digests, it is dropped, so a stream that never
// finishes cannot grow the queue without bound.
constexpr size_t kMaxInFlight = 8;

}  // namespace

at::Tensor ReplicaDigests::digestOf(const at::Tensor& param) {
  at::Tensor flat = param.detach();
  if (!flat.is_contiguous()) flat = flat.contiguous();  // parameters are, in practice: no copy
  flat = flat.reshape({-1});
  const int64_t bytes = flat.numel() * static_cast<int64_t>(flat.element_size());
  // Read as 32-bit words where the bytes allow it (a view, no copy); a tensor of 2-byte or 1-byte
  // elements that does not fill whole words (or starts mid-word) is summed element by element.
  if (bytes % 4 == 0 && (flat.storage_offset() * static_cast<int64_t>(flat.element_size())) % 4 == 0) {
    return at::sum(flat.view(at::kInt), at::kInt);
  }
  const at::ScalarType same_width = flat.element_size() == 2 ? at::kShort : at::kByte;
  return at::sum(flat.view(same_width), at::kInt);
}

uint64_t ReplicaDigests::open(int64_t step, std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  if (names.empty()) return id;  // nothing replicated: no step to record
  Step s;
  s.id = id;
  s.step = step;
  s.digests.assign(names.size(), 0);
  s.missing = names.size();
  s.names = std::move(names);
  steps_.push_back(std::move(s));
  return id;
}

ReplicaDigests::Step* ReplicaDigests::find(uint64_t id) {
  for (Step& s : steps_) {
    if (s.id == id) return &s;
  }
  return nullptr;  // dropped (too far behind), or opened with no parameter
}

void ReplicaDigests::give(Step& s, size_t place, int32_t digest) {
  if (place >= s.digests.size() || s.missing == 0) return;
  s.digests[place] = digest;
  --s.missing;
}

void ReplicaDigests::digest(uint64_t id, size_t place, uint32_t digest) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Step* s = find(id)) give(*s, place, static_cast<int32_t>(digest));
}

void ReplicaDigests::lost(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Step* s = find(id)) s->lost = true;
}

void ReplicaDigests::sum(uint64_t id, const std::vector<size_t>& places, const std::vector<at::Tensor>& params) {
  if (params.empty()) return;
  std::vector<at::Tensor> digests;
  digests.reserve(params.size());
  for (const at::Tensor& p : params) digests.push_back(digestOf(p));
  at::Tensor all = at::stack(digests);
  Sums sums;
  sums.places = places;
  if (all.is_cpu()) {
    sums.host = all;
  } else {
    sums.host = at::empty({all.numel()}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
    sums.host.copy_(all, /*non_blocking=*/true);
    const c10::Device device = all.device();
    sums.copied = std::make_unique<c10::Event>(device.type());
    sums.copied->record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (Step* s = find(id)) s->sums.push_back(std::move(sums));
}

std::vector<ReplicaDigests::Step> ReplicaDigests::takeSettled(bool at_exit) {
  std::vector<Step> settled;
  std::lock_guard<std::mutex> lock(mu_);
  while (!steps_.empty()) {
    Step& s = steps_.front();
    const bool behind = steps_.size() > kMaxInFlight;
    if (behind)
      logOnce("replica digests behind",
              "replica digests: the device fell more than 8 steps behind; they were waited for");
    for (auto it = s.sums.begin(); it != s.sums.end();) {
      if (it->copied && !(at_exit || behind) && !it->copied->query()) {
        ++it;
        continue;
      }
      if (it->copied) it->copied->synchronize();
      const int32_t* words = it->host.const_data_ptr<int32_t>();
      for (size_t i = 0; i < it->places.size() && static_cast<int64_t>(i) < it->host.numel(); ++i) {
        give(s, it->places[i], words[i]);
      }
      it = s.sums.erase(it);
    }
    if (s.missing > 0 && !s.lost && (at_exit || behind)) {
      // What is still missing is a dense check's, which cannot be waited for here.
      logOnce("replica digests dropped",
              "replica digests: a step's dense checks had not finished; that step was not "
              "compared (step " +
                  std::to_string(s.step) + ")");
      s.lost = true;
    }
    if (s.lost && !s.sums.empty() && !at_exit) break;  // its copies still read pinned memory: kept till done
    if (s.missing > 0 && !s.lost) break;               // in order: later steps wait behind it
    settled.push_back(std::move(s));
    steps_.pop_front();
  }
  return settled;
}

void ReplicaDigests::collect(bool at_exit) {
  std::vector<ReplicaDigestRecord> rows;
  for (Step& s : takeSettled(at_exit)) {
    if (s.lost) continue;
    for (size_t i = 0; i < s.names.size(); ++i) {
      rows.push_back(ReplicaDigestRecord{.step = s.step, .parameter = std::move(s.names[i]), .digest = s.digests[i]});
    }
  }
  // One batch: each step's digests reach the store together, which weighs them into its
  // whole-model digest (store/replica_digest_rows.h).
  if (!rows.empty()) record_(std::move(rows));
}

}  // namespace nanprov::probes
