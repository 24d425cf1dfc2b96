// A capture file read back as the call it describes: its tensors as LibTorch tensors (on the
// CPU, in the captured dtypes), its scalar arguments, and what it ran on. Checks that the
// tensors make one attention call; a file that does not gets one clear error.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>

#include "base/status.h"
#include "replay/replay_result.h"
#include "store/capture_file.h"

namespace nanprov::replay {

struct CapturedCall {
  std::map<std::string, std::string> meta;
  std::map<std::string, at::Tensor> tensors;  // by role: Q K V mask O LSE dO dQ dK dV
  bool backward = false;
  std::optional<double> scale;  // none: 1/sqrt(head_dim)
  bool causal = false;
  double dropout_p = 0;
  bool dropout_recorded = false;  // the capture says dropout_p (else 0 is a default, not a fact)
  int64_t batch = 0, q_heads = 0, kv_heads = 0, s_q = 0, s_kv = 0, head_dim = 0, v_dim = 0;
  at::Tensor valid_q, valid_kv;       // [batch, seq] bool for packed sequences unpacked with padding
  std::string incomplete;             // what of the call the capture lacks, so replay cannot judge it
  std::vector<LayoutReport> layouts;  // each tensor's memory layout: in the run, and as rebuilt here
  bool materialised_bias = false;     // the mask is a bias nanprov computed (FlexAttention's score_mod), in float32
  // How the run made its scores, for plain_softmax: "matmul" (Q·Kᵀ, then scaled), "baddbmm" (scaled
  // by its alpha before rounding), "" (Q scaled first: nn.MultiheadAttention).
  std::string scores_by;

  bool has(const std::string& role) const { return tensors.count(role) > 0; }
  const at::Tensor& at(const std::string& role) const { return tensors.at(role); }
  std::string metaOr(const std::string& key, const std::string& fallback = "") const;
  double softmaxScale() const;
};

StatusOr<CapturedCall> toCapturedCall(const store::CaptureFile& file, const std::string& source);

// A tensor as a capture file holds it (for the repro's inputs).
store::CaptureTensor toCaptureTensor(const std::string& name, const at::Tensor& t);

// "bfloat16", as torch spells dtypes (base/records/dtype.h's table); an integer type as LibTorch
// names it ("Long").
std::string dtypeName(const at::Tensor& t);

}  // namespace nanprov::replay
