// ForwardChecks: what each forward's check read, so that its backward does not read the same
// tensors again (issue 66, "fewer bytes"). A backward of SDPA takes Q, K, V, the mask, O and LSE
// as inputs: the very tensors its forward's check read, unless something wrote to them since.
// Each forward's checked tensors are remembered here under the forward's sequence number (a
// recomputed forward's under its own: the backward links to the recompute), with each tensor's
// storage, place, layout and version counter. A backward that passes one of them unchanged takes
// the forward's counts for it instead of reading it.
//
// Unchanged means all of:
//   - the same storage, still alive (held by a weak reference, so its address cannot be reused);
//   - the same data pointer, dtype, sizes and strides, and the same masked-row reading (the role's);
//   - the same version counter value. Every in-place ATen write bumps it, and autograd itself
//     refuses a backward whose saved tensors changed this way.
// Writes that bypass the version counter are not seen, as for deferred checks (deferred_calls.h):
// through `.data`, a foreign kernel writing a data pointer, torch's _unsafe_preserve_version_counter
// or _unsafe_set_version_counter, or a storage resized to 0 and back at the same address (FSDP2
// does both to parameters, which attention inputs rarely are). Calls inside torch.compile'd
// graphs, CUDA graph captures and inference tensors never take part. NANPROV_BACKWARD_REREAD=1
// turns this off: every backward reads all its tensors again (the benchmark's `reread`).
//
// The edge rule stays exact: a backward's inputs keep the counts a read of them would give, and
// its outputs (dQ, dK, dV) are always read. A forward's counts arrive when its check is
// collected, which may be after its backward's check finished: CheckLanes then parks the
// backward until they arrive. Where the forward's check failed, the backward is not recorded,
// as a failed check of its own would not be.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

#include "base/inline_vector.h"
#include "base/records/call_event.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {

// One forward call's counts, filled once its check is back; read by its backward. Lives in its
// ForwardChecks slot, which is not reused while a ForwardCountsRef holds it.
class ForwardCounts {
 public:
  enum class State : int { kPending, kDone, kFailed };

  State state() const { return state_.load(std::memory_order_acquire); }
  // The forward's tensors with their counts (rec.tensors once counted); read only once kDone.
  const CallTensors& tensors() const { return tensors_; }
  void fill(const CallTensors& tensors) {
    tensors_ = tensors;
    state_.store(State::kDone, std::memory_order_release);
  }
  void fail() { state_.store(State::kFailed, std::memory_order_release); }

 private:
  friend class ForwardChecks;
  friend class ForwardCountsRef;
  std::atomic<State> state_{State::kPending};
  std::atomic<int> users_{0};  // ForwardCountsRefs: the forward's check in flight, backwards waiting
  CallTensors tensors_;
};

// A hold on a ForwardCounts: its forward's check, or a backward that takes its counts. Move-only.
class ForwardCountsRef {
 public:
  ForwardCountsRef() = default;
  ForwardCountsRef(ForwardCountsRef&& other) noexcept
      : counts_(std::exchange(other.counts_, nullptr)), producer_(other.producer_) {}
  ForwardCountsRef& operator=(ForwardCountsRef&& other) noexcept {
    if (this != &other) {
      reset();
      counts_ = std::exchange(other.counts_, nullptr);
      producer_ = other.producer_;
    }
    return *this;
  }
  ~ForwardCountsRef() { reset(); }

  // The forward's own hold gives up on counts it never filled (its check dropped on the way, an
  // exception say): a backward waiting for them must not wait for ever.
  void reset() {
    if (counts_ && producer_ && counts_->state() == ForwardCounts::State::kPending) counts_->fail();
    if (counts_) counts_->users_.fetch_sub(1, std::memory_order_acq_rel);
    counts_ = nullptr;
  }
  ForwardCounts* operator->() const { return counts_; }
  explicit operator bool() const { return counts_ != nullptr; }

 private:
  friend class ForwardChecks;
  // A use already counted; `producer`: the forward's own, which fills the counts.
  ForwardCountsRef(ForwardCounts* counts, bool producer) : counts_(counts), producer_(producer) {}
  ForwardCounts* counts_ = nullptr;
  bool producer_ = false;
};

// The backward's tensors whose counts come from its forward: pairs of (the backward's
// rec.tensors index, the forward's), with the forward's counts.
struct InheritedTensors {
  ForwardCountsRef forward;
  InlineVector<std::pair<uint8_t, uint8_t>, kMaxCallTensors> pairs;
  std::atomic<int64_t>* counted = nullptr;  // ForwardChecks::inherited(), added to when filled

  bool empty() const { return pairs.empty(); }
  // Whether the tensor at `index` (of the call's, as of rec.tensors) takes its forward's counts.
  bool has(size_t index) const {
    for (const auto& [to, from] : pairs) {
      if (to == index) return true;
    }
    return false;
  }
  // Copies the forward's counts into `rec`'s inherited tensors (forward->state() is kDone), and
  // counts them as not read again.
  void fillInto(CallEvent& rec) const;
};

// The table is shared by the threads that run forwards and backwards (the training thread,
// autograd's), and never waited for: each side claims it with one atomic exchange, and one that
// finds it claimed goes without (a forward not remembered, a backward that reads its tensors).
// Remembering allocates nothing: every slot's counts live in the table.
class ForwardChecks {
 public:
  // The forwards remembered at once; a newer forward takes an older one's slot once nothing
  // holds its counts (a miss only means a read).
  static constexpr size_t kSlots = 512;

  ForwardChecks();  // off with NANPROV_BACKWARD_REREAD=1
  ForwardChecks(const ForwardChecks&) = delete;
  ForwardChecks& operator=(const ForwardChecks&) = delete;

  // Whether `rec` (a backward) passes tensors its forward's check read, unchanged: which of
  // `tensors` (rec.tensors is built in the same order) and the forward's counts. Empty for
  // anything else.
  InheritedTensors inherit(const CallEvent& rec, const RoleTensors& tensors);
  // Remembers the tensors of forward `rec` at `checked` (indices into `tensors`, as into
  // rec.tensors), read by a check that fills the counts held by what is returned. Empty where
  // `rec` has no backward to serve (not a forward, compiled, or nothing to remember), or its slot
  // is busy.
  ForwardCountsRef remember(const CallEvent& rec, const RoleTensors& tensors,
                            const InlineVector<uint8_t, kMaxCallTensors>& checked);
  // As remember(), for a forward whose counts are already known (measured on the host).
  void rememberMeasured(const CallEvent& rec, const RoleTensors& tensors);

  // Tensors whose counts a backward took, recorded (not read again).
  int64_t inherited() const { return inherited_.load(std::memory_order_relaxed); }

 private:
  // What identifies a tensor's values, without holding them.
  struct Tensor {
    // Keeps the StorageImpl's address from reuse, not its memory.
    c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
    const void* data = nullptr;
    at::ScalarType dtype = at::ScalarType::Undefined;
    bool masked_rows = false;
    int8_t ndim = 0;
    std::array<int64_t, 6> sizes{}, strides{};
    uint32_t version = 0;
    uint8_t index = 0;  // in the forward's rec.tensors
  };
  using Tensors = InlineVector<Tensor, kMaxCallTensors>;
  struct Forward {
    int64_t key = -1;  // the forward's seq
    Tensors tensors;
    ForwardCounts counts;
  };
  static std::optional<Tensor> identify(const at::Tensor& t, Role role);
  static bool same(const Tensor& remembered, const Tensor& now);
  bool claim() { return !claimed_.exchange(true, std::memory_order_acquire); }
  void unclaim() { claimed_.store(false, std::memory_order_release); }

  const bool on_;
  std::atomic<bool> claimed_{false};
  std::array<Forward, kSlots> forwards_;  // by key % kSlots
  std::atomic<int64_t> inherited_{0};
};

}  // namespace nanprov::probes
