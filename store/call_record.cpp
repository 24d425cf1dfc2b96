#include "store/call_record.h"

namespace nanprov {

const char* phaseName(Phase p) { return p == Phase::kForward ? "fwd" : "bwd"; }

bool parsePhase(const std::string& text, Phase* out) {
  if (text == "fwd" || text == "forward") {
    *out = Phase::kForward;
    return true;
  }
  if (text == "bwd" || text == "backward") {
    *out = Phase::kBackward;
    return true;
  }
  return false;
}

}  // namespace nanprov
