#include "probes/libtorch/gradient_sentinel.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/library.h>

#include <cmath>
#include <deque>
#include <limits>
#include <mutex>
#include <sstream>

#include "probes/core/session.h"

namespace nanprov {
namespace {

// A finding names at most this many parameters per kind: enough to point at the culprit
// without writing a whole model's names when everything has gone NaN.
constexpr size_t kMaxNamed = 64;

struct PendingCheck {
  int64_t step = 0;
  std::string names;               // one line per parameter; split only if something is found
  size_t grads = 0;                // norms[i] is gradient i, norms[grads + i] parameter i
  at::Tensor norms;                // float32 on the host (pinned on CUDA)
  std::optional<c10::Event> done;  // recorded after the copy; none on the CPU
};

class Sentinel {
 public:
  static Sentinel& get() {
    static Sentinel* s = new Sentinel();  // leaked: used until the process exits
    return *s;
  }

  void check(const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& params,
             const std::string& names, int64_t step) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (found_) return;  // the first non-finite step is what the report needs
    }
    if (grads.size() != params.size() || grads.empty()) return;
    PendingCheck pending;
    pending.step = step;
    pending.grads = grads.size();
    pending.names = names;

    std::vector<at::Tensor> all(grads);
    all.insert(all.end(), params.begin(), params.end());
    const c10::Device device = all.front().device();
    for (const at::Tensor& t : all) {
      if (!t.defined() || t.device() != device || !t.is_floating_point()) {
        logOnce("sentinel devices", "gradient sentinel: parameters on several devices (or not floating point) "
                                    "are not checked yet; attention checks go on");
        return;
      }
    }
    // float32 norms whatever the dtype: one multi-tensor reduction, then one small copy.
    at::Tensor norms = at::stack(at::_foreach_norm(all, std::numeric_limits<double>::infinity(), at::kFloat));
    if (device.is_cpu()) {
      pending.norms = norms;
      record(pending);
      return;
    }
    pending.norms = at::empty({norms.numel()}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    pending.norms.copy_(norms, /*non_blocking=*/true);
    c10::impl::VirtualGuardImpl guard(device.type());
    pending.done.emplace(device.type());
    pending.done->record(guard.getStream(device));
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.push_back(std::move(pending));
  }

  void poll(bool wait) {
    std::deque<PendingCheck> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!in_flight_.empty() && (wait || in_flight_.front().done->query())) {
        ready.push_back(std::move(in_flight_.front()));
        in_flight_.pop_front();
      }
    }
    for (PendingCheck& p : ready) {
      if (wait) p.done->synchronize();
      record(p);
    }
  }

 private:
  void record(const PendingCheck& p) {
    const float* norm = p.norms.data_ptr<float>();
    std::vector<SentinelRecord> findings;
    std::vector<std::string> names;
    size_t named[2] = {0, 0};
    for (size_t i = 0; i < 2 * p.grads; ++i) {
      if (std::isfinite(norm[i])) continue;
      size_t kind = i < p.grads ? 0 : 1;
      if (named[kind]++ >= kMaxNamed) continue;
      if (names.empty()) {
        std::istringstream lines(p.names);
        for (std::string line; std::getline(lines, line);) names.push_back(line);
        names.resize(p.grads);
      }
      size_t param = i % p.grads;
      SentinelRecord f;
      f.step = p.step;
      f.tensor = kind == 0 ? "grad" : "param";
      f.parameter = names[param].empty() ? "param" + std::to_string(param) : names[param];
      f.norm = norm[i];
      findings.push_back(std::move(f));
    }
    if (findings.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (found_) return;  // an earlier step's finding was already recorded
      found_ = true;
    }
    Session& session = Session::get();
    session.setMeta("sentinel_nonfinite_grads", std::to_string(named[0]));
    session.setMeta("sentinel_nonfinite_params", std::to_string(named[1]));
    session.recordSentinel(std::move(findings));
  }

  std::mutex mu_;
  bool found_ = false;
  std::deque<PendingCheck> in_flight_;  // in step order
};

// The op's body: never lets anything reach the training.
void checkStep(const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& params,
               const std::string& names, int64_t step) {
  if (!Session::get().active()) return;
  try {
    at::NoGradGuard no_grad;
    Sentinel::get().check(grads, params, names, step);
  } catch (const std::exception& e) {
    logOnce("sentinel", std::string("gradient sentinel failed, gradients are not checked: ") + e.what());
  }
}

}  // namespace

void installGradientSentinel() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: dropping the Library deregisters the op.
    auto* library = new torch::Library(torch::Library::DEF, "nanprov", std::nullopt, __FILE__, __LINE__);
    library->def("check_step(Tensor[] grads, Tensor[] params, str names, int step) -> ()", &checkStep);
  });
}

void pollGradientSentinel(bool wait) {
  try {
    Sentinel::get().poll(wait);
  } catch (const std::exception& e) {
    logOnce("sentinel poll", std::string("gradient sentinel failed: ") + e.what());
  }
}

}  // namespace nanprov
