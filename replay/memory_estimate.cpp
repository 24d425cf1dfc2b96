#include "replay/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace nanprov::replay {
namespace {

constexpr int64_t kReferenceSlabBytes = int64_t{256} << 20;  // reference_blocks.h: a slab's scores

}  // namespace

std::string gigabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

MemoryNeed replayMemory(const CallShape& call, const std::vector<std::string>& backends, bool judge_only) {
  const int64_t elem = call.element_bytes;
  const int64_t q_rows = call.batch * call.q_heads * call.s_q;
  const int64_t scores = q_rows * call.s_kv;
  const int64_t kv_rows = call.batch * call.kv_heads * call.s_kv;
  // The outputs of one backend; the reference's in float64 (kept, and again on the host to judge),
  // and the two yardsticks' the judge measures against, held in float64 beside them (an audit's too).
  const int64_t outputs =
      q_rows * (call.v_dim + 1) + (call.backward ? q_rows * call.head_dim + kv_rows * (call.head_dim + call.v_dim) : 0);
  int64_t resident = call.input_bytes + 4 * 8 * outputs;
  // Backends whose scores are materialised whole: forward keeps scores, logits and probabilities
  // (at least float32), the backward as many again for their gradients.
  const int64_t materialised = scores * std::max<int64_t>(elem, 4) * (call.backward ? 6 : 3);
  std::vector<std::pair<int64_t, std::string>> transients = {
      {kReferenceSlabBytes * 3 + 8 * (kv_rows * (call.head_dim + call.v_dim)) * 2, "the float64 reference"},
      {materialised, "the yardstick's scores"}};  // an audit's too
  if (!judge_only) {
    for (const std::string& b : backends) {
      if (b == "math" || b == "plain_softmax") transients.emplace_back(materialised, "the " + b + " backend's scores");
      else transients.emplace_back(4 * outputs * elem, "the " + b + " backend");
    }
    resident += static_cast<int64_t>(backends.size()) * outputs * elem;  // each backend's outputs, kept to judge
  }
  auto peak = std::max_element(transients.begin(), transients.end());
  return {.bytes = resident + peak->first, .largest = peak->second + ", " + gigabytes(peak->first)};
}

int64_t defaultReplayBudget() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream in(line);
    std::string key;
    int64_t kib = 0;
    if (in >> key >> kib && key == "MemAvailable:") return kib * 1024 / 4 * 3;
  }
  return int64_t{8} << 30;
}

}  // namespace nanprov::replay
