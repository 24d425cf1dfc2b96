#include "report/call_kernels.h"

#include "report/edges.h"
#include "report/report.h"

namespace nanprov {

nlohmann::json kernelsJson(const CallKernels& kernels) {
  nlohmann::json list = nlohmann::json::array();
  const KernelRecord* main = mainKernel(kernels);
  for (const KernelRecord* k : kernels) {
    list.push_back({{"name", k->name},
                    {"short_name", shortKernelName(k->name)},
                    {"main", k == main},
                    {"grid", {k->grid[0], k->grid[1], k->grid[2]}},
                    {"block", {k->block[0], k->block[1], k->block[2]}},
                    {"start_ns", k->start_ns},
                    {"end_ns", k->end_ns},
                    {"duration_ns", k->end_ns - k->start_ns},
                    {"device", k->device < 0 ? nlohmann::json("cpu") : nlohmann::json(k->device)},
                    {"stream", k->stream},
                    {"correlation_id", k->correlation_id}});
  }
  return list;
}

namespace {

std::string signatureOf(const CallRecord& c) {
  std::string sig = std::to_string(c.rank) + "|" + std::to_string(c.layer) + "|" + phaseName(c.phase) + "|" +
                    c.op + "|" + c.backend;
  for (const TensorHealth& t : c.tensors) sig += std::string("|") + roleName(t.role) + ":" + t.dtype.c_str() + t.shape.text();
  return sig;
}

}  // namespace

CallKernelIndex::CallKernelIndex(const RunData& run) : run_(run) {
  for (const CallRecord& c : run.calls) {  // ordered by step and time: later calls overwrite
    if (!c.device.isCpu() && !run.kernelsOf(c.rank, c.seq).empty()) traced_[signatureOf(c)] = &c;
  }
}

const ReplayedKernels* CallKernelIndex::replayedKernelsOf(const CallRecord& call) const {
  const CaptureRecord* capture = run_.captureOf(call.rank, call.seq);
  if (!capture || capture->path.empty()) return nullptr;
  std::string path = run_.capturePath(*capture);
  auto it = replayed_.find(path);
  if (it == replayed_.end()) {
    auto read = readReplayedKernels(path);  // an unreadable list is as good as none
    it = replayed_.emplace(path, read.ok() ? *read : std::nullopt).first;
  }
  return it->second && !it->second->kernels.empty() ? &*it->second : nullptr;
}

KernelsOfCall CallKernelIndex::of(const CallRecord& call) const {
  KernelsOfCall out;
  out.kernels = run_.kernelsOf(call.rank, call.seq);
  if (!out.kernels.empty() || call.device.isCpu()) {
    out.from = "run";
    return out;
  }
  if (const ReplayedKernels* replayed = replayedKernelsOf(call)) {
    for (const KernelRecord& k : replayed->kernels) out.kernels.push_back(&k);
    out.from = "replay";
    out.replayed_on = replayed->gpu;
    return out;
  }
  auto it = traced_.find(signatureOf(call));
  if (it == traced_.end()) return out;
  out.from = "inferred";
  out.inferred_from = it->second;
  out.kernels = run_.kernelsOf(it->second->rank, it->second->seq);
  return out;
}

std::string attributionOf(const CallRecord& call, const KernelsOfCall& k) {
  if (call.device.isCpu()) return "the ATen CPU op";
  std::string missed = call.unattributed.empty() ? "its own records were lost" : call.unattributed;
  if (k.from == "replay") return "traced in a replay of its capture on " + k.replayed_on + "; " + missed;
  if (k.inferred_from) {
    return "inferred from " + callName(*k.inferred_from) + " at step " + std::to_string(k.inferred_from->step) +
           " (same layer, op and shapes; " + missed + ")";
  }
  if (!call.unattributed.empty()) return "unattributed: " + call.unattributed;
  if (k.kernels.empty()) return "no kernel record arrived (the run may have ended before CUPTI flushed)";
  return "CUPTI";
}

}  // namespace nanprov
