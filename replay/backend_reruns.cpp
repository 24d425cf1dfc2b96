#include "replay/backend_reruns.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include <cstring>
#include <optional>
#include <utility>

#include "replay/backend_kernels.h"
#include "replay/backend_names.h"
#include "replay/backends.h"

namespace nanprov::replay {
namespace {

// Distinct results are kept to compare the next rerun with; past this many every new one counts
// as distinct without being kept, so a wildly unstable kernel costs no more memory.
constexpr size_t kKeptResults = 4;

bool sameBits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor x = a.detach().to(at::kCPU).contiguous(), y = b.detach().to(at::kCPU).contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;  // NaN payloads included
}

Outputs onHost(const Outputs& o) {
  auto host = [](const at::Tensor& t) { return t.defined() ? t.detach().to(at::kCPU).clone() : t; };
  return {host(o.o), host(o.lse), host(o.dq), host(o.dk), host(o.dv)};
}

std::string deviceName(const at::Device& device) {
  if (device.is_cpu()) return "cpu";
  std::string model = gpuModel(device.index());
  return device.str() + (model.empty() ? "" : " (" + model + ")");
}

// The results of one backend's reruns, counted as they come.
class ResultTally {
 public:
  void add(const Outputs& result) {
    for (const Outputs& seen : kept_) {
      if (bitwiseEqual(seen, result)) return;
    }
    ++distinct_;
    if (kept_.size() < kKeptResults) kept_.push_back(onHost(result));
  }
  int distinct() const { return distinct_; }

 private:
  std::vector<Outputs> kept_;
  int distinct_ = 0;
};

// The captured backend on one device: `runs` reruns (the first given, when it ran there).
DeviceReruns rerunOn(const RerunRequest& req, const std::string& backend, const at::Device& device,
                     const Outputs* first, const BackendRun* first_judged, const JudgeOutputs& judge,
                     const std::function<void(const std::string&)>& stage) {
  DeviceReruns out;
  out.device = deviceName(device);
  ResultTally tally;
  auto count = [&](const Outputs& raw, const BackendRun& judged) {
    ++out.runs;
    tally.add(raw);
    if (reproduces(judged, *req.captured)) ++out.reproduced;
    if (bitwiseEqual(raw, req.captured_outputs)) ++out.identical_to_run;
  };
  if (first && first_judged) count(*first, *first_judged);
  // A rerun that gives the bits of one already judged is judged as that one was: judging compares
  // every output with the float64 reference, 0.2 s a rerun at (2, 16, 4096, 128) on the H100,
  // and would say the same. Kept as the backend gave them (judging makes new tensors).
  std::optional<std::pair<Outputs, BackendRun>> judged_once;
  if (first && first_judged) judged_once.emplace(*first, *first_judged);
  while (out.runs < req.runs) {
    stage("rerunning " + backend + " on " + device.str() + " (" + std::to_string(out.runs + 1) + " of " +
          std::to_string(req.runs) + ")");
    auto outputs = runBackend(backend, *req.call, device);
    if (!outputs.ok()) {
      if (out.runs == 0) break;  // it cannot run on this device at all: no reruns there
      ++out.runs;                // it ran before: a rerun that fails gave not the run's result
      continue;
    }
    const Outputs raw = *outputs;  // judging makes new tensors: these stay as the backend gave them
    if (judged_once && bitwiseEqual(raw, judged_once->first)) {
      count(raw, judged_once->second);
      continue;
    }
    BackendRun judged = judge(BackendRun{.name = backend, .ran = true, .original = true}, *outputs);
    count(raw, judged);
    if (!judged_once) judged_once.emplace(raw, std::move(judged));
  }
  out.distinct = tally.distinct();
  return out;
}

// Other GPUs here of the same model as `device`: a result that depends on the device shows there.
std::vector<at::Device> sameModelDevices(const at::Device& device) {
  std::vector<at::Device> out;
  if (!device.is_cuda()) return out;
  const int count = at::detail::getCUDAHooks().getNumGPUs();
  const std::string model = gpuModel(device.index());
  for (int i = 0; i < count; ++i) {
    if (i != device.index() && !model.empty() && gpuModel(i) == model)
      out.emplace_back(at::kCUDA, static_cast<at::DeviceIndex>(i));
  }
  return out;
}

}  // namespace

bool bitwiseEqual(const Outputs& a, const Outputs& b) {
  int compared = 0;
  for (const char* role : {"O", "LSE", "dQ", "dK", "dV"}) {
    const at::Tensor &x = a.of(role), &y = b.of(role);
    if (!x.defined() || !y.defined()) continue;
    if (!sameBits(x, y)) return false;
    ++compared;
  }
  return compared > 0;
}

Reruns rerunBackends(const RerunRequest& req, const std::vector<BackendRun>& first, const Outputs& original_outputs,
                     const JudgeOutputs& judge, const std::function<void(const std::string&)>& stage) {
  Reruns reruns;
  size_t original = first.size();
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i].original) original = i;
  }
  if (original == first.size()) {
    reruns.not_rerun = "replay has no backend of its own that runs it";
    return reruns;
  }
  const BackendRun& captured_backend = first[original];
  reruns.backend = captured_backend.name;
  if (rerunsThroughItsPackage(captured_backend.name)) {
    reruns.not_rerun = "a call rerun through its own package runs once, in a child process";
    return reruns;
  }
  if (!captured_backend.ran) {
    reruns.not_rerun = "it did not run here" + (captured_backend.detail.empty() ? "" : ": " + captured_backend.detail);
    return reruns;
  }
  reruns.devices.push_back(
      rerunOn(req, captured_backend.name, req.device, &original_outputs, &captured_backend, judge, stage));
  for (const at::Device& other : sameModelDevices(req.device)) {
    reruns.devices.push_back(rerunOn(req, captured_backend.name, other, nullptr, nullptr, judge, stage));
  }
  const DeviceReruns& here = reruns.devices.front();
  if (here.reproduced == 0 || here.reproduced == here.runs) return reruns;
  // Some reruns gave the run's result and some did not: is the call unstable, or the kernel?
  for (size_t i = 0; i < first.size(); ++i) {
    if (i == original || !first[i].ran || rerunsThroughItsPackage(first[i].name)) continue;
    BackendStability b{.name = first[i].name};
    ResultTally tally;
    auto count = [&](const Outputs& raw, const BackendRun& judged) {
      ++b.runs;
      tally.add(raw);
      if (!judged.failing().empty()) ++b.failed;
    };
    while (b.runs < req.runs) {
      stage("rerunning " + first[i].name + " (" + std::to_string(b.runs + 1) + " of " + std::to_string(req.runs) + ")");
      auto outputs = runBackend(first[i].name, *req.call, req.device);
      if (!outputs.ok()) break;
      const Outputs raw = *outputs;  // judging makes new tensors: these stay as the backend gave them
      count(raw, judge(BackendRun{.name = first[i].name, .ran = true}, *outputs));
    }
    b.distinct = tally.distinct();
    reruns.others.push_back(b);
  }
  return reruns;
}

}  // namespace nanprov::replay
