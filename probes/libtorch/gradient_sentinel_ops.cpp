// The ops the bootstrap's optimizer hook calls (gradient_sentinel_ops.h): entry points, so they
// find the process's gradient sentinel through processProbes().
#include "probes/libtorch/gradient_sentinel_ops.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: torch 2.11's ATen.h does not bring it
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/log_once.h"
#include "probes/core/session.h"
#include "probes/libtorch/probes.h"

namespace nanprov::probes {
namespace {

// The ops' bodies: nothing reaches the training.
void watchParameters(int64_t key, const std::vector<at::Tensor>& params, const std::string& names,
                     const std::vector<int64_t>& sharded, const std::vector<int64_t>& replicated,
                     const std::vector<int64_t>& replica_ranks) {
  if (!processProbes().session().active()) return;
  try {
    processProbes().sentinel().watch(key, params, names, sharded, replicated, replica_ranks);
  } catch (const std::exception& e) {
    logOnce("sentinel", std::string("gradient sentinel failed, gradients are not checked: ") + e.what());
  }
}

bool checkStep(int64_t key, int64_t step, const c10::List<std::optional<at::Tensor>>& shards) {
  if (!processProbes().session().active()) return true;
  try {
    at::NoGradGuard no_grad;
    std::vector<std::optional<at::Tensor>> local(shards.begin(), shards.end());
    return processProbes().sentinel().check(key, step, local);
  } catch (const std::exception& e) {
    logOnce("sentinel", std::string("gradient sentinel failed, gradients are not checked: ") + e.what());
    return true;
  }
}

}  // namespace

void installGradientSentinel() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: dropping the Library deregisters the ops.
    auto* library = new torch::Library(torch::Library::DEF, "nanprov", std::nullopt, __FILE__, __LINE__);
    library->def(
        "watch_parameters(int key, Tensor[] params, str names, int[] sharded, int[] replicated=[], "
        "int[] replica_ranks=[]) -> ()",
        &watchParameters);
    library->def("check_step(int key, int step, Tensor?[] shards) -> bool", &checkStep);
  });
}

}  // namespace nanprov::probes
