// What the captured backend's reruns say, counted (replay_result.h: Reruns): no LibTorch, so the
// root cause and the renderers read it as they read the verdicts.
#include <algorithm>

#include "replay/replay_result.h"

namespace nanprov::replay {

bool reproduces(const BackendRun& rerun, const BackendRun& captured) {
  if (!rerun.ran) return false;
  for (const Comparison& c : captured.tensors) {
    const Comparison* again = rerun.tensor(c.role);
    if (!again) return false;
    // ok and suspect are one class here: a rerun that drifts within the loose bounds gave the
    // run's (passing) result; a failure recurs only as the same failure.
    if (isFailure(c.verdict) != isFailure(again->verdict)) return false;
    if (isFailure(c.verdict) && c.verdict != again->verdict) return false;
  }
  return true;
}

int Reruns::runs() const {
  int n = 0;
  for (const DeviceReruns& d : devices) n += d.runs;
  return n;
}

int Reruns::reproduced() const {
  int n = 0;
  for (const DeviceReruns& d : devices) n += d.reproduced;
  return n;
}

bool Reruns::everyRerunIdentical() const {
  return !devices.empty() &&
         std::all_of(devices.begin(), devices.end(), [](const DeviceReruns& d) { return d.distinct == 1; });
}

bool Reruns::dependsOnDevice() const {
  // Every rerun on one device gave the run's result, and none on another.
  const bool always = std::any_of(devices.begin(), devices.end(),
                                  [](const DeviceReruns& d) { return d.runs > 0 && d.reproduced == d.runs; });
  const bool never = std::any_of(devices.begin(), devices.end(),
                                 [](const DeviceReruns& d) { return d.runs > 0 && d.reproduced == 0; });
  return always && never;
}

}  // namespace nanprov::replay
