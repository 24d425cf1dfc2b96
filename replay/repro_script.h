// `nanprov replay --emit-repro DIR`: a standalone Python script that re-runs the call through one
// SDPA backend next to a float64 MATH reference, reading the captured inputs from a minimal
// safetensors file with nothing but the standard library and PyTorch. Made to be attached to an
// upstream bug report as it is.
#pragma once

#include <optional>
#include <string>

namespace nanprov::replay {

struct ReproSpec {
  std::string call;     // rank0:layer1:call1
  std::string finding;  // one line: what replay found
  std::string backend;  // nanprov's name: cudnn flash efficient math flash_cpu
  std::string device;   // "cuda" or "cpu"
  bool causal = false;
  std::optional<double> scale;
  bool gqa = false;
  std::string versions;  // where the capture was taken: torch, CUDA, cuDNN, GPU
  // The root cause class; "precision-limit" makes the script say the failure is the dtype's
  // range, shared by every backend, and not a kernel bug.
  std::string root_cause;
};

inline constexpr const char* kReproInputs = "inputs.safetensors";
inline constexpr const char* kReproScript = "repro.py";

std::string reproScript(const ReproSpec& spec);

}  // namespace nanprov::replay
