// What every backend of one replay is judged against, per output: G (the float64 reference), the
// yardsticks' errors and G's floor per dtype, worked out once and shared by all the backends'
// comparisons (DESIGN.md, "Verdicts"). On a GPU, G stays there and each output is measured there;
// on the CPU, G and each output are folded as host float64.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "replay/outputs.h"
#include "replay/verdict.h"

namespace nanprov::replay {

// 2·max|fl(G+c)−c−G| in `dtype` over G's finite values, c = 0.3·max|G|: about one unit in the last
// place near max|G|, at any scale. Non-finite positions count as 0.
double floorOf(const at::Tensor& g, at::ScalarType dtype);

class Judge {
 public:
  // `yardsticks`: low-precision computations of the same call that a correct kernel may follow;
  // a tensor's yardstick error is the largest of theirs (an undefined tensor is no yardstick).
  // The first is the one whose non-finite values are reported (yardstickNonfinite).
  Judge(const Outputs& g, const std::vector<const Outputs*>& yardsticks);

  std::vector<Comparison> compareWith(const Outputs& b);

  // Outputs the first yardstick itself could not compute (non-finite where G is finite).
  std::vector<std::string> yardstickNonfinite() const;

 private:
  struct Role {
    at::Tensor g;  // on the host, owns the values ref.g reads
    bool onHost() const { return !g.is_cuda(); }
    RoleReference ref;
    std::vector<int64_t> sizes;
    std::map<at::ScalarType, double> floors;
  };
  std::vector<Role> roles_;
};

}  // namespace nanprov::replay
