// The time calls, steps and module checks are stamped with: CLOCK_REALTIME in nanoseconds, so the
// ranks of one host can be ordered against each other (a steady clock is per process).
#pragma once

#include <chrono>
#include <cstdint>

namespace nanprov {

inline int64_t wallClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace nanprov
