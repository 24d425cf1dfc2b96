#include "probes/libtorch/held_tensors.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <array>

#include "base/env.h"
#include "probes/core/probe_cost.h"

namespace nanprov::probes {
namespace {

// Default hold budget: enough for a few calls of a large model in flight.
constexpr int64_t kDefaultHoldBytes = int64_t{2} << 30;

// How many storages dropping `held` frees: those whose every tensor is referenced only by `held`
// (a role may repeat one, as self-attention's q = k = v), with no other tensor on them. At most
// kMaxCallTensors entries, so pairwise passes over small arrays, no allocation.
int64_t lastReferences(const RoleTensors& held) {
  const size_t n = std::min(held.size(), kMaxCallTensors);
  std::array<const c10::TensorImpl*, kMaxCallTensors> impl{};
  std::array<const c10::StorageImpl*, kMaxCallTensors> storage{};
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& t = held[i].second;
    impl[i] = t.unsafeGetTensorImpl();
    storage[i] = t.defined() && t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  }
  int64_t freed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!storage[i] || std::find(storage.begin(), storage.begin() + i, storage[i]) != storage.begin() + i) continue;
    size_t tensors = 0;  // distinct tensors on this storage
    bool only_held = true;
    for (size_t j = i; j < n; ++j) {
      if (storage[j] != storage[i] || std::find(impl.begin() + i, impl.begin() + j, impl[j]) != impl.begin() + j)
        continue;
      ++tensors;
      const auto refs = static_cast<size_t>(std::count(impl.begin() + j, impl.begin() + n, impl[j]));
      only_held = only_held && static_cast<size_t>(held[j].second.use_count()) == refs;
    }
    freed += only_held && static_cast<size_t>(held[i].second.storage().use_count()) == tensors;
  }
  return freed;
}

}  // namespace

HeldTensors::HeldTensors() : budget_(envInteger("NANPROV_HOLD_BYTES", kDefaultHoldBytes, 0)) {}

// Over the hold budget: the tensors are not held. Their memory is marked in use on the check's
// stream, so the caching allocator waits for the check before reusing it.
void HeldTensors::markInUse(const RoleTensors& tensors, const c10::Stream& stream) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  for (const auto& [role, t] : tensors) {
    if (t.has_storage() && t.is_cuda()) guard.recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
}

// Where nanprov held the last reference (a backward's dQ, dK, dV once autograd is done with
// them), dropping it is the caching allocator's free: timed apart, as it is the user's cost moved.
void HeldTensors::release(RoleTensors& held, CallArgs& args) {
  ProbeCost::Scope cost(ProbeStage::kReleasing);
  released_.fetch_add(static_cast<int64_t>(held.size()), std::memory_order_relaxed);
  released_last_.fetch_add(lastReferences(held), std::memory_order_relaxed);
  held.clear();
  args.clear();  // IValues that may hold tensors too (a backward's philox seed and offset)
}

}  // namespace nanprov::probes
