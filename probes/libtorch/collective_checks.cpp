#include "probes/libtorch/collective_checks.h"

#include <algorithm>
#include <utility>

#include "base/log_once.h"
#include "base/wall_clock.h"
#include "probes/core/session.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {
namespace {

// The first collectives that carried a non-finite value are what the report needs; once every
// gradient is NaN each later step would add rows for nothing.
constexpr int64_t kMaxRecorded = 64;

void addCounts(CollectiveSide& side, const MeasuredChecks::Counts& c) {
  side.nan += c.nan;
  side.posinf += c.posinf;
  side.neginf += c.neginf;
  side.max_abs = std::max(side.max_abs, c.max_abs);
}

}  // namespace

uint64_t CollectiveChecks::begin(const char* op, const std::string& group, int64_t group_size,
                                 const std::vector<at::Tensor>& inputs) {
  const int64_t step = session_.identity().step();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    auto& [ord_step, ord] = ordinals_[group];
    ord = ord_step == step ? ord + 1 : 0;
    ord_step = step;
    Open& open = open_[id];
    open.rec.step = step;
    open.rec.ord = ord;
    open.rec.op = op;
    open.rec.group = group;
    open.rec.group_size = group_size;
    open.rec.time_ns = wallClockNs();
  }
  submit(id, false, inputs);
  return id;
}

void CollectiveChecks::complete(uint64_t id, const std::vector<at::Tensor>& outputs) {
  submit(id, true, outputs);
  CollectiveRecord done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(id);
    if (it == open_.end()) return;
    it->second.completed = true;
    if (!takeIfDone(it, &done)) return;
  }
  recordIfNotClean(done);
}

// CPU tensors are scanned here; CUDA tensors go to the device checks, kMaxMeasured to a launch, each
// launch a measure in flight. The side is `checked` when any of its tensors was read.
void CollectiveChecks::submit(uint64_t id, bool output, const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  CollectiveSide host;
  std::vector<std::vector<at::Tensor>> launches;
  for (const at::Tensor& t : tensors) {
    host.numel += t.numel();
    if (!t.is_cuda()) {
      const TensorHealth h = measureValues(t);
      addCounts(host, {h.nan, h.posinf, h.neginf, h.max_abs});
      continue;
    }
    if (launches.empty() || launches.back().size() == MeasuredChecks::kMaxMeasured ||
        launches.back().front().device() != t.device()) {
      launches.emplace_back();
    }
    launches.back().push_back(t);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(id);
    if (it == open_.end()) return;
    Open& open = it->second;
    CollectiveSide& side = output ? open.rec.output : open.rec.input;
    side.checked = true;
    side.numel += host.numel;
    addCounts(side, {host.nan, host.posinf, host.neginf, host.max_abs});
    open.rec.tensors = std::max<int64_t>(open.rec.tensors, static_cast<int64_t>(tensors.size()));
    open.waiting += static_cast<int>(launches.size());  // before measure: it may call back at once
  }
  const uint64_t context = id << 1 | (output ? 1 : 0);
  for (const std::vector<at::Tensor>& launch : launches) {
    if (!checks_.measure(launch, *this, context)) measured(context, nullptr, -1);  // a graph capture: never read
  }
}

void CollectiveChecks::measured(uint64_t context, const MeasuredChecks::Counts* counts, int n) {
  CollectiveRecord done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(context >> 1);
    if (it == open_.end()) return;
    Open& open = it->second;
    CollectiveSide& side = context & 1 ? open.rec.output : open.rec.input;
    if (n == 0) {  // n < 0: not launched (submit)
      logOnce("collective device", "a collective's check failed on the device; that collective is judged on the rest");
    }
    for (int i = 0; i < n; ++i) addCounts(side, counts[i]);
    --open.waiting;
    if (!takeIfDone(it, &done)) return;
  }
  recordIfNotClean(done);
}

bool CollectiveChecks::takeIfDone(std::map<uint64_t, Open>::iterator it, CollectiveRecord* out) {
  if (!it->second.completed || it->second.waiting > 0) return false;
  *out = std::move(it->second.rec);
  open_.erase(it);
  return true;
}

void CollectiveChecks::recordIfNotClean(const CollectiveRecord& rec) {
  checked_.fetch_add(1, std::memory_order_relaxed);
  if (rec.input.nonfinite() == 0 && rec.output.nonfinite() == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recorded_++ >= kMaxRecorded) return;
  }
  session_.recordCollectives({rec});
}

}  // namespace nanprov::probes
