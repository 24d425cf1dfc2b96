#include "replay/reference_blocks.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nanprov::replay {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
// Query rows per slab: its scores stay near 256 MiB of float64 whatever the key length, and a
// slab's few temporaries fit any GPU that can hold the call.
constexpr int64_t kSlabScores = int64_t(1) << 25;

}  // namespace

ReferenceOutputs referenceByBlocks(const ReferenceInputs& in, const at::Device& device) {
  auto f64 = [&](const at::Tensor& t) { return t.to(device, at::kDouble).contiguous(); };
  const at::Tensor q = f64(in.q), k = f64(in.k), v = f64(in.v);
  const int64_t batch = q.size(0), q_heads = q.size(1), s_q = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1), s_kv = k.size(2), v_dim = v.size(3), group = q_heads / kv_heads;
  const double scale = in.scale != 0 ? in.scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  at::Tensor mask;
  if (in.mask.defined()) {
    mask = (in.mask.scalar_type() == at::kBool ? in.mask.to(device) : f64(in.mask)).expand({batch, q_heads, s_q, s_kv});
  }
  const bool backward = in.dout.defined();
  const at::Tensor dout = backward ? f64(in.dout) : at::Tensor();

  auto options = q.options();
  ReferenceOutputs out;
  out.o = at::zeros({batch, q_heads, s_q, v_dim}, options);
  out.lse = at::full({batch, q_heads, s_q}, kMinusInf, options);
  if (backward) {
    out.dq = at::zeros_like(q);
    out.dk = at::zeros_like(k);
    out.dv = at::zeros_like(v);
  }
  const int64_t rows = in.slab_rows > 0 ? in.slab_rows : std::max<int64_t>(1, kSlabScores / s_kv);
  const at::Tensor keys = at::arange(s_kv, options.dtype(at::kLong)).unsqueeze(0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < q_heads; ++h) {
      const int64_t kvh = h / group;
      const at::Tensor kb = k[b][kvh], vb = v[b][kvh];
      for (int64_t r0 = 0; r0 < s_q; r0 += rows) {
        const int64_t r1 = std::min(s_q, r0 + rows);
        const at::Tensor qs = q[b][h].slice(0, r0, r1);
        at::Tensor scores = at::matmul(qs, kb.t()).mul_(scale);
        at::Tensor hidden;
        if (in.causal) hidden = keys > at::arange(r0, r1, keys.options()).unsqueeze(1);
        if (mask.defined()) {
          at::Tensor m = mask[b][h].slice(0, r0, r1);
          if (m.scalar_type() == at::kBool)
            hidden = hidden.defined() ? hidden.logical_or(m.logical_not()) : m.logical_not();
          else scores.add_(m);
        }
        if (hidden.defined()) scores.masked_fill_(hidden, kMinusInf);
        // Softmax with the row max taken out; a row with no visible key keeps all zeros.
        at::Tensor max = std::get<0>(scores.max(-1, true));
        at::Tensor seen = max.ne(kMinusInf);
        at::Tensor p = (scores - at::where(seen, max, at::zeros_like(max))).exp_();
        at::Tensor sum = p.sum(-1, true);
        p.div_(at::where(seen, sum, at::ones_like(sum)));
        out.lse[b][h].slice(0, r0, r1).copy_(
            at::where(seen, max + sum.log(), at::full_like(max, kMinusInf)).squeeze(-1));
        out.o[b][h].slice(0, r0, r1).copy_(at::matmul(p, vb));
        if (!backward) continue;
        // dP = dO V^T; dS = P (dP - rowsum(P dP)) scale; dQ = dS K; dK += dS^T Q; dV += P^T dO.
        const at::Tensor dos = dout[b][h].slice(0, r0, r1);
        at::Tensor dp = at::matmul(dos, vb.t());
        at::Tensor delta = (p * dp).sum(-1, true);
        at::Tensor ds = p.mul(dp.sub_(delta)).mul_(scale);
        out.dq[b][h].slice(0, r0, r1).copy_(at::matmul(ds, kb));
        out.dk[b][kvh].add_(at::matmul(ds.t(), qs));
        out.dv[b][kvh].add_(at::matmul(p.t(), dos));
      }
    }
  }
  return out;
}

}  // namespace nanprov::replay
