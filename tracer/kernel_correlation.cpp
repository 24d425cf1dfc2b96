#include "tracer/kernel_correlation.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace nanprov {

std::string demangleKernelName(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                  &std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

void KernelCorrelation::attribute(LaunchedKernel&& k, uint64_t external_id) {
  KernelRecord r;
  r.seq = static_cast<int64_t>(external_id) - 1;
  r.correlation_id = k.correlation_id;
  r.name = demangleKernelName(k.name);
  for (int d = 0; d < 3; ++d) {
    r.grid[d] = k.grid[d];
    r.block[d] = k.block[d];
  }
  r.start_ns = k.start_ns;
  r.end_ns = k.end_ns;
  r.device = k.device;
  r.stream = k.stream;
  attributed_.push_back(std::move(r));
  ++attributed_total_;
}

void KernelCorrelation::onExternalId(uint32_t correlation_id, uint64_t external_id) {
  if (external_id != 0 && ids_.size() < kMaxIds) ids_[correlation_id] = {external_id, round_};
}

uint64_t KernelCorrelation::callOf(uint32_t correlation_id) const {
  auto it = ids_.find(correlation_id);
  return it == ids_.end() ? 0 : it->second.external_id;
}

void KernelCorrelation::onKernel(LaunchedKernel kernel) {
  if (uint64_t call = callOf(kernel.correlation_id)) {
    attribute(std::move(kernel), call);
  } else if (waiting_.size() < kMaxWaiting) {
    waiting_.push_back(std::move(kernel));
  }
}

std::vector<KernelRecord> KernelCorrelation::takeAttributed() {
  // Kernels that arrived before their mapping: one pass per take, not one per record.
  for (auto* pool : {&waiting_, &previous_waiting_}) {
    std::vector<LaunchedKernel> still;
    for (LaunchedKernel& k : *pool) {
      if (uint64_t call = callOf(k.correlation_id)) {
        attribute(std::move(k), call);
      } else {
        still.push_back(std::move(k));
      }
    }
    pool->swap(still);
  }
  std::vector<KernelRecord> out;
  out.swap(attributed_);
  return out;
}

void KernelCorrelation::endRound() {
  ++round_;
  previous_waiting_ = std::move(waiting_);
  waiting_.clear();
  // Old mappings go, in one sweep now and then: correlation ids are reused after 2^32 calls.
  if (round_ % 256 == 0 || ids_.size() >= kMaxIds) {
    int64_t oldest = ids_.size() >= kMaxIds ? round_ - 1 : round_ - kIdRounds;
    std::erase_if(ids_, [&](const auto& entry) { return entry.second.round < oldest; });
  }
}

}  // namespace nanprov
