// What one run of a captured call produced, in the layouts the comparison reads: O, dQ
// [B, Hq, S, D], dK, dV [B, Hkv, S, D], LSE [B, Hq, S]. Undefined where the run does not produce it.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace nanprov::replay {

struct Outputs {
  at::Tensor o, lse, dq, dk, dv;

  const at::Tensor& of(const std::string& role) const {
    static const at::Tensor undefined;
    if (role == "O") return o;
    if (role == "LSE") return lse;
    if (role == "dQ") return dq;
    if (role == "dK") return dk;
    if (role == "dV") return dv;
    return undefined;
  }
};

}  // namespace nanprov::replay
