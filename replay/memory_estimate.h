// How much memory a replay will take, worked out from the captured shapes before anything runs:
// a capture of half a megabyte can describe a call whose scores matrix is tens of gigabytes
// (Q, K, V of [1, 1, 46341, 1]), and the MATH backend and the yardstick materialise it. Replay
// refuses, in one line, a call that would not fit instead of being killed for memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nanprov::replay {

// The sizes of a captured call that decide what a replay allocates.
struct CallShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, s_q = 0, s_kv = 0, head_dim = 0, v_dim = 0;
  int64_t element_bytes = 4;  // of the query
  int64_t input_bytes = 0;    // every captured tensor
  bool backward = false;
};

struct MemoryNeed {
  int64_t bytes = 0;    // at the peak, host memory, for a replay on the CPU
  std::string largest;  // what needs the most ("the MATH backend's scores, 25.8 GB")
};

// `backends` as replay will run them; `judge_only` for an audit (the reference and the
// yardsticks the judge measures against, no backend).
MemoryNeed replayMemory(const CallShape& call, const std::vector<std::string>& backends, bool judge_only);

// The budget when none is given: three quarters of the memory available now (MemAvailable).
int64_t defaultReplayBudget();

// "25.8 GB"
std::string gigabytes(int64_t bytes);

}  // namespace nanprov::replay
