// KernelTracer where nanprov was built without CUPTI: every call is unattributed, with the reason.
#include "tracer/kernel_tracer.h"

namespace nanprov {
namespace {

constexpr const char* kReason = "nanprov was built without CUPTI (CUDA toolkit not found at configure time)";

class NoCuptiTracer final : public KernelTracer {
 public:
  Status start() override { return Status::Error(kReason); }
  bool enter(int64_t, const std::string&) override { return false; }
  bool wantsLabel() const override { return false; }
  void exit() override {}
  bool settled() const override { return true; }  // it never traces nor labels
  void yield(const std::string&) override {}
  void reclaim() override {}
  bool yielded() const override { return false; }
  void pause(const std::string&) override {}
  void keepAttached() override {}
  const char* unattributedReason() const override { return kReason; }
  std::vector<KernelRecord> collect(bool) override { return {}; }
  TracerStats stats() const override { return {}; }
};

}  // namespace

std::unique_ptr<KernelTracer> KernelTracer::create() { return std::make_unique<NoCuptiTracer>(); }

void pushCallRange(const std::string&) {}
void popCallRange() {}

}  // namespace nanprov
