// The backends replay knows, by name, in one place: the engine runs them, and the nanprov command
// checks --backends and picks the edges it can rerun with them, without linking LibTorch.
#pragma once

#include <string>
#include <vector>

namespace nanprov::replay {

// The backends the engine reruns through ATen: cudnn flash efficient math flash_cpu plain_softmax.
const std::vector<std::string>& knownBackends();
bool isKnownBackend(const std::string& backend);

// fa2, fa3, fa4, ffpa: the backends only their Python package can run (replay/flash_rerun.h).
const std::vector<std::string>& packageBackends();
bool rerunsThroughItsPackage(const std::string& backend);

}  // namespace nanprov::replay
