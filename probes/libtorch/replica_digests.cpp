#include "probes/libtorch/replica_digests.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <utility>

#include "base/log_once.h"
#include "probes/core/session.h"

namespace nanprov {
namespace {

// Digests waiting for their device: past this many steps behind, the oldest are waited for, so a
// stream that never finishes cannot grow the queue without bound.
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

void ReplicaDigests::take(int64_t step, std::vector<std::string> names, const std::vector<at::Tensor>& params) {
  if (params.empty()) return;
  std::vector<at::Tensor> digests;
  digests.reserve(params.size());
  for (const at::Tensor& p : params) digests.push_back(digestOf(p));
  at::Tensor all = at::stack(digests);
  if (all.is_cpu()) {
    record(step, names, all);
    return;
  }
  InFlight f;
  f.step = step;
  f.names = std::move(names);
  f.host = at::empty({all.numel()}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  f.host.copy_(all, /*non_blocking=*/true);
  const c10::Device device = all.device();
  f.copied = std::make_unique<c10::Event>(device.type());
  f.copied->record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
  bool full;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.push_back(std::move(f));
    full = in_flight_.size() > kMaxInFlight;
  }
  if (full) logOnce("replica digests behind", "replica digests: the device fell more than 8 steps behind; they were waited for");
  collect(full);
}

void ReplicaDigests::collect(bool at_exit) {
  for (;;) {
    InFlight f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_flight_.empty()) return;
      InFlight& oldest = in_flight_.front();
      if (!at_exit && !oldest.copied->query()) return;
      f = std::move(oldest);
      in_flight_.pop_front();
    }
    if (at_exit) f.copied->synchronize();
    record(f.step, f.names, f.host);
  }
}

void ReplicaDigests::record(int64_t step, const std::vector<std::string>& names, const at::Tensor& host) {
  const int32_t* words = host.const_data_ptr<int32_t>();
  std::vector<ReplicaDigestRecord> rows;
  rows.reserve(names.size());
  for (size_t i = 0; i < names.size() && static_cast<int64_t>(i) < host.numel(); ++i) {
    rows.push_back(ReplicaDigestRecord{.step = step, .parameter = names[i], .digest = words[i]});
  }
  session_.recordReplicaDigests(std::move(rows));
}

}  // namespace nanprov
