// The kernels a replay saw each backend launch for a captured call, kept next to the capture
// (CAPTURE.kernels.json) so that `nanprov report` can name the kernel of an edge that ran after
// the run's kernel-tracing window: the captured backend, fed the captured tensors on the same
// GPU model, launches the same kernels. Written by the replay engine, read by the report.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "base/status.h"

namespace nanprov::store {

struct ReplayedKernels {
  std::string gpu;                    // the GPU model replayed on, which is also the one captured on
  std::string backend;                // the captured call's backend, whose kernels these are
  std::string phase;                  // fwd, bwd
  std::vector<KernelRecord> kernels;  // launch order; seq and rank are the captured call's
};

// CAPTURE with ".safetensors" replaced by ".kernels.json".
std::string replayedKernelsPath(const std::string& capture_path);

Status writeReplayedKernels(const std::string& capture_path, const ReplayedKernels& replayed);

// nullopt when no replay left kernels for this capture; an error when the file is unreadable.
StatusOr<std::optional<ReplayedKernels>> readReplayedKernels(const std::string& capture_path);

}  // namespace nanprov::store
