#include "replay/tensor_measures.h"

#include <algorithm>

namespace nanprov::replay {
namespace {

template <typename T>
std::vector<T> hostVector(const at::Tensor& t) {
  at::Tensor host = t.contiguous().cpu();
  const T* p = host.data_ptr<T>();
  return std::vector<T>(p, p + host.numel());
}

}  // namespace

Measures measureTensors(const Grid& grid, const at::Tensor& b_in, const at::Tensor& g_in) {
  const int64_t cols = std::max<int64_t>(1, grid.cols);
  if (g_in.numel() == 0) return Measures{};
  const at::Tensor g = g_in.reshape({-1, cols});
  const at::Tensor b = b_in.to(g.device()).to(at::kDouble).reshape({-1, cols});
  const at::Tensor g_finite = at::isfinite(g);
  const at::Tensor b_lost = g_finite & ~at::isfinite(b);  // non-finite in B where G is finite
  const at::Tensor both = g_finite & ~b_lost;
  const at::Tensor zero = at::zeros({}, g.options());
  const at::Tensor gb = at::where(both, g, zero), bb = at::where(both, b, zero);
  const at::Tensor d = bb - gb;
  const at::Tensor ad = d.abs();
  // Every sum in one tensor: one copy to the host, one synchronisation.
  const at::Tensor sums = at::stack({ad.max(), ad.sum(), both.sum().to(at::kDouble), b_lost.sum().to(at::kDouble),
                                     (d * d).sum(), (gb * gb).sum(), (bb * bb).sum(), (gb * bb).sum()})
                              .cpu();
  const double* s = sums.data_ptr<double>();
  Measures m;
  const int64_t n = static_cast<int64_t>(s[2]);  // exact: counts below 2^53
  m.err = {s[0], n ? s[1] / static_cast<double>(n) : 0, static_cast<int64_t>(s[3])};
  m.compared = n;
  m.diff2 = s[4];
  m.g2 = s[5];
  m.b2 = s[6];
  m.bg = s[7];
  m.row_nonfinite = hostVector<int64_t>(b_lost.sum(-1));
  m.row_b_zero = hostVector<uint8_t>(b.eq(0).all(-1).to(at::kByte));
  m.row_g_max = hostVector<double>(at::where(g_finite, g.abs(), zero).amax(-1));
  return m;
}

}  // namespace nanprov::replay
