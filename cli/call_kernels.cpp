#include "cli/call_kernels.h"

#include "cli/edges.h"

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
  for (const TensorHealth& t : c.tensors) sig += "|" + t.role + ":" + t.dtype + t.shape;
  return sig;
}

}  // namespace

CallKernelIndex::CallKernelIndex(const RunData& run) : run_(run) {
  for (const CallRecord& c : run.calls) {  // ordered by step and time: later calls overwrite
    if (c.device != "cpu" && !run.kernelsOf(c.rank, c.seq).empty()) traced_[signatureOf(c)] = &c;
  }
}

KernelsOfCall CallKernelIndex::of(const CallRecord& call) const {
  KernelsOfCall out;
  out.kernels = run_.kernelsOf(call.rank, call.seq);
  if (!out.kernels.empty() || call.device == "cpu") return out;
  auto it = traced_.find(signatureOf(call));
  if (it == traced_.end()) return out;
  out.inferred_from = it->second;
  out.kernels = run_.kernelsOf(it->second->rank, it->second->seq);
  return out;
}

std::string attributionOf(const CallRecord& call, const KernelsOfCall& k) {
  if (call.device == "cpu") return "the ATen CPU op";
  if (k.inferred_from) {
    return "inferred from " + callName(*k.inferred_from) + " at step " + std::to_string(k.inferred_from->step) +
           " (same layer, op and shapes; " + (call.unattributed.empty() ? "its own records were lost" : call.unattributed) +
           ")";
  }
  if (!call.unattributed.empty()) return "unattributed: " + call.unattributed;
  if (k.kernels.empty()) return "no kernel record arrived (the run may have ended before CUPTI flushed)";
  return "CUPTI";
}

}  // namespace nanprov
