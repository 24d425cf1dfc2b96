#include "replay/judge.h"

#include <algorithm>

#include "replay/tensor_measures.h"

namespace nanprov::replay {
namespace {

constexpr const char* kRoles[] = {"O", "LSE", "dQ", "dK", "dV"};

Grid gridOf(const at::Tensor& g) {
  Grid grid;
  grid.batch = g.size(0);
  grid.heads = g.size(1);
  grid.rows = g.size(2);
  grid.cols = g.dim() == 4 ? g.size(3) : 1;
  return grid;
}

// A tensor as dense host float64: copied in its own dtype (a quarter of the bytes for bf16),
// then widened on the CPU's cores.
at::Tensor hostDoubles(const at::Tensor& t) { return t.detach().to(at::kCPU).to(at::kDouble).contiguous(); }

Values valuesOf(const at::Tensor& host_doubles) {
  return Values(host_doubles.data_ptr<double>(), static_cast<size_t>(host_doubles.numel()));
}

}  // namespace

// (DESIGN.md's c = 0.3 is the same for tensors of order 1; for the gradients of a mean loss,
// about 1e-6, it would be a thousand times their size, and every backward, even an all-zero one,
// would pass.)
double floorOf(const at::Tensor& g, at::ScalarType dtype) {
  if (g.numel() == 0) return 0;
  at::Tensor finite = at::where(at::isfinite(g), g, at::zeros({}, g.options()));
  const double largest = finite.abs().max().item<double>();
  const double c = largest > 0 ? 0.3 * largest : 0.3;
  at::Tensor rounded = (finite + c).to(dtype).to(at::kDouble);
  return 2 * (rounded - c - finite).abs().max().item<double>();
}

Judge::Judge(const Outputs& g, const std::vector<const Outputs*>& yardsticks) {
  for (const char* role : kRoles) {
    const at::Tensor& gt = g.of(role);
    if (!gt.defined()) continue;
    Role r;
    r.g = gt.is_cuda() ? gt.contiguous() : hostDoubles(gt);
    r.ref = RoleReference{.role = role, .grid = gridOf(gt), .g = r.onHost() ? valuesOf(r.g) : Values()};
    bool first = true;
    for (const Outputs* l : yardsticks) {
      const at::Tensor& lt = l->of(role);
      if (!lt.defined() || lt.sizes() != gt.sizes()) continue;
      const Measures m = r.onHost() ? measure(r.ref.grid, valuesOf(hostDoubles(lt)), valuesOf(r.g))
                                    : measureTensors(r.ref.grid, lt, r.g);
      if (first) {
        r.ref.yardstick = m.err;
        r.ref.yardstick_rel_l2 = relL2(m);
        r.ref.has_yardstick = true;
        first = false;
        continue;
      }
      r.ref.yardstick.max = std::max(r.ref.yardstick.max, m.err.max);
      r.ref.yardstick.mean = std::max(r.ref.yardstick.mean, m.err.mean);
      r.ref.yardstick_rel_l2 = std::max(r.ref.yardstick_rel_l2, relL2(m));
    }
    r.sizes = gt.sizes().vec();
    roles_.push_back(std::move(r));
  }
}

std::vector<Comparison> Judge::compareWith(const Outputs& b) {
  std::vector<Comparison> out;
  for (Role& r : roles_) {
    const at::Tensor& bt = b.of(r.ref.role);
    if (!bt.defined() || bt.sizes().vec() != r.sizes) continue;
    auto floor = r.floors.find(bt.scalar_type());
    if (floor == r.floors.end()) floor = r.floors.emplace(bt.scalar_type(), floorOf(r.g, bt.scalar_type())).first;
    if (r.onHost()) {
      at::Tensor bd = hostDoubles(bt);
      out.push_back(compare(r.ref, valuesOf(bd), floor->second));
    } else {
      out.push_back(judge(r.ref, measureTensors(r.ref.grid, bt, r.g), floor->second));
    }
  }
  return out;
}

std::vector<std::string> Judge::yardstickNonfinite() const {
  std::vector<std::string> out;
  for (const Role& r : roles_) {
    if (r.ref.has_yardstick && r.ref.yardstick.nonfinite > 0) out.push_back(r.ref.role);
  }
  return out;
}

}  // namespace nanprov::replay
