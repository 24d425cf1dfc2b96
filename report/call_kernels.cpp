#include "report/call_kernels.h"

#include "base/records/call_name.h"
#include "store/reader.h"
#include "store/replayed_kernels.h"

namespace nanprov::report {

nlohmann::json kernelsJson(const std::vector<KernelRecord>& kernels) {
  nlohmann::json list = nlohmann::json::array();
  const KernelRecord* main = mainKernel(kernels);
  for (const KernelRecord& k : kernels) {
    list.push_back({{"name", k.name},
                    {"short_name", shortKernelName(k.name)},
                    {"main", &k == main},
                    {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                    {"block", {k.block[0], k.block[1], k.block[2]}},
                    {"start_ns", k.start_ns},
                    {"end_ns", k.end_ns},
                    {"duration_ns", k.end_ns - k.start_ns},
                    {"device", k.device < 0 ? nlohmann::json("cpu") : nlohmann::json(k.device)},
                    {"stream", k.stream},
                    {"correlation_id", k.correlation_id}});
  }
  return list;
}

namespace {

std::string signatureOf(const CallRecord& c) {
  std::string sig =
      std::to_string(c.rank) + "|" + std::to_string(c.layer) + "|" + phaseName(c.phase) + "|" + c.op + "|" + c.backend;
  for (const TensorHealth& t : c.tensors)
    sig += std::string("|") + roleName(t.role) + ":" + t.dtype.c_str() + t.shape.text();
  return sig;
}

std::vector<KernelRecord> copied(const CallKernels& kernels) {
  std::vector<KernelRecord> out;
  for (const KernelRecord* k : kernels) out.push_back(*k);
  return out;
}

}  // namespace

CallKernelIndex::CallKernelIndex(const store::RunData& run) : run_(run) {
  for (const CallRecord& c : run.calls) {  // ordered by step and time: later calls overwrite
    if (!c.device.isCpu() && !run.kernelsOf(c.rank, c.seq).empty()) traced_[signatureOf(c)] = &c;
  }
}

CallKernelIndex::~CallKernelIndex() = default;

const store::ReplayedKernels* CallKernelIndex::replayedKernelsOf(const CallRecord& call) const {
  const CaptureRecord* capture = run_.captureOf(call.rank, call.seq);
  if (!capture || capture->path.empty()) return nullptr;
  std::string path = run_.capturePath(*capture);
  auto it = replayed_.find(path);
  if (it == replayed_.end()) {
    auto read = store::readReplayedKernels(path);  // an unreadable list is as good as none
    it = replayed_
             .emplace(path, read.ok() && *read ? std::make_unique<store::ReplayedKernels>(std::move(**read)) : nullptr)
             .first;
  }
  return it->second && !it->second->kernels.empty() ? it->second.get() : nullptr;
}

KernelsOfCall CallKernelIndex::of(const CallRecord& call) const {
  KernelsOfCall out;
  // Where the call's own records went, for the words of a replay's or an inferred attribution.
  const std::string missed = call.unattributed.empty() ? "its own records were lost" : call.unattributed;
  out.kernels = copied(run_.kernelsOf(call.rank, call.seq));
  if (call.device.isCpu()) {
    out.from = "run";
    out.attribution = "the ATen CPU op";
    return out;
  }
  if (!out.kernels.empty()) {
    out.from = "run";
    out.attribution = call.unattributed.empty() ? "CUPTI" : "unattributed: " + call.unattributed;
    return out;
  }
  if (const store::ReplayedKernels* replayed = replayedKernelsOf(call)) {
    out.kernels = replayed->kernels;
    out.from = "replay";
    out.attribution = "traced in a replay of its capture on " + replayed->gpu + "; " + missed;
    return out;
  }
  auto it = traced_.find(signatureOf(call));
  if (it == traced_.end()) {
    out.attribution = !call.unattributed.empty()
                          ? "unattributed: " + call.unattributed
                          : "no kernel record arrived (the run may have ended before CUPTI flushed)";
    return out;
  }
  const CallRecord& source = *it->second;
  out.from = "inferred";
  out.inferred_from = callName(source);
  out.kernels = copied(run_.kernelsOf(source.rank, source.seq));
  out.attribution = "inferred from " + out.inferred_from + " at step " + std::to_string(source.step) +
                    " (same layer, op and shapes; " + missed + ")";
  return out;
}

}  // namespace nanprov::report
