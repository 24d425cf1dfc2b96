// CallTally: how many attention calls a rank's probes began, kept in a file of its own
// (rank-<r>.tally) through a shared memory mapping. Every increment is in the kernel's page cache
// the moment it is made, so the count survives the process ending by any path, SIGKILL included,
// and the report can say how many of the last calls never reached the store.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"

namespace nanprov {

// Named by callTallyName() in store/run_dir.h.
class CallTally {
 public:
  // Creates `path` (8 bytes, zero) or reopens it, and maps it.
  static StatusOr<std::unique_ptr<CallTally>> open(const std::string& path);
  ~CallTally();
  CallTally(const CallTally&) = delete;
  CallTally& operator=(const CallTally&) = delete;

  void add(int64_t n = 1);  // one atomic add to the mapping: no system call

 private:
  explicit CallTally(int64_t* count) : count_(count) {}
  int64_t* count_;
};

// The count in `path`; nullopt when there is no tally (older runs) or it is not one.
std::optional<int64_t> readCallTally(const std::string& path);

}  // namespace nanprov
