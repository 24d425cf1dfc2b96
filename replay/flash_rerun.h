// FlashAttention 2, 3 and 4 and FFPA run only through their Python packages, so replay reruns a call
// they made in a child Python (nanprov_boot.flash_rerun): the Python nanprov was built against, or
// NANPROV_REPLAY_PYTHON (nanprov replay --python). Where the package does not import, the call
// cannot be rerun here and the root cause names the captured backend the suspect.
#pragma once

#include <string>

#include "base/status.h"
#include "replay/backends.h"
#include "store/capture_file.h"

namespace nanprov::replay {

// Reruns the captured call `file` (read from `capture_path`) through its own package on `device`
// and returns its outputs in the comparison's layouts; an error says why it could not run.
StatusOr<Outputs> rerunThroughPackage(const store::CaptureFile& file, const std::string& capture_path,
                                      const at::Device& device);

}  // namespace nanprov::replay
