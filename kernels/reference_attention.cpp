#include "kernels/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace nanprov::reference {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// One (batch, q head) pair: where its rows live and which kv head it reads.
struct Head {
  int64_t b, h, kvh;
};

double scaleOf(const AttentionShape& s, const AttentionOptions& o) {
  return o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
}

// The scaled, masked logits of query row i against every key: -inf where the key is hidden.
void logitsOfRow(const AttentionShape& s, const Head& hd, int64_t i, const double* q, const std::vector<double>& k,
                 const MaskView& mask, const AttentionOptions& o, double scale, std::vector<double>& row) {
  const double* qi = q + ((hd.b * s.q_heads + hd.h) * s.q_len + i) * s.head_dim;
  for (int64_t j = 0; j < s.kv_len; ++j) {
    bool visible = (!o.causal || j <= i) && (o.window_left < 0 || j >= i - o.window_left) &&
                   (o.window_right < 0 || j <= i + o.window_right);
    int64_t m = hd.b * mask.strides[0] + hd.h * mask.strides[1] + i * mask.strides[2] + j * mask.strides[3];
    if (mask.kind == MaskView::Kind::kBool) visible = visible && mask.allow[m] != 0;
    if (!visible) {
      row[j] = kMinusInf;
      continue;
    }
    const double* kj = k.data() + ((hd.b * s.kv_heads + hd.kvh) * s.kv_len + j) * s.head_dim;
    double dot = 0;
    for (int64_t d = 0; d < s.head_dim; ++d) dot += qi[d] * kj[d];
    row[j] = dot * scale + (mask.kind == MaskView::Kind::kAdditive ? mask.additive[m] : 0.0);
  }
}

// Softmax of a row in place; returns its log-sum-exp. A row with no finite logit gives zeros
// and -inf (PyTorch's safe softmax).
double softmaxInPlace(std::vector<double>& row) {
  double max = kMinusInf;
  for (double x : row) max = std::max(max, x);
  if (max == kMinusInf) {
    std::fill(row.begin(), row.end(), 0.0);
    return kMinusInf;
  }
  double sum = 0;
  for (double& x : row) sum += (x = std::exp(x - max));
  for (double& x : row) x /= sum;
  return max + std::log(sum);
}

template <typename F>
void forEachHead(const AttentionShape& s, F&& body) {
  const int64_t group = s.q_heads / s.kv_heads;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.q_heads; ++h) body(Head{b, h, h / group});
  }
}

}  // namespace

Status validate(const AttentionShape& s, size_t q, size_t k, size_t v) {
  if (s.batch < 1 || s.q_heads < 1 || s.kv_heads < 1 || s.q_len < 1 || s.kv_len < 1 || s.head_dim < 1 || s.v_dim < 1) {
    return Status::Error("reference attention: every dimension must be at least 1");
  }
  if (s.q_heads % s.kv_heads != 0) {
    return Status::Error("reference attention: " + std::to_string(s.q_heads) + " query heads is not a multiple of " +
                         std::to_string(s.kv_heads) + " key/value heads");
  }
  auto n = [](std::initializer_list<int64_t> dims) {
    size_t p = 1;
    for (int64_t d : dims) p *= static_cast<size_t>(d);
    return p;
  };
  if (q != n({s.batch, s.q_heads, s.q_len, s.head_dim}) || k != n({s.batch, s.kv_heads, s.kv_len, s.head_dim}) ||
      v != n({s.batch, s.kv_heads, s.kv_len, s.v_dim})) {
    return Status::Error("reference attention: Q, K or V holds a different number of elements than the shape says");
  }
  return Status::Ok();
}

StatusOr<Forward> forward(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const MaskView& mask, const AttentionOptions& o) {
  NANPROV_RETURN_IF_ERROR(validate(s, q.size(), k.size(), v.size()));
  Forward f;
  f.out.assign(static_cast<size_t>(s.batch * s.q_heads * s.q_len * s.v_dim), 0.0);
  f.lse.assign(static_cast<size_t>(s.batch * s.q_heads * s.q_len), kMinusInf);
  const double scale = scaleOf(s, o);
  std::vector<double> p(static_cast<size_t>(s.kv_len));
  forEachHead(s, [&](const Head& hd) {
    for (int64_t i = 0; i < s.q_len; ++i) {
      logitsOfRow(s, hd, i, q.data(), k, mask, o, scale, p);
      const int64_t row = (hd.b * s.q_heads + hd.h) * s.q_len + i;
      f.lse[row] = softmaxInPlace(p);
      double* oi = f.out.data() + row * s.v_dim;
      for (int64_t j = 0; j < s.kv_len; ++j) {
        if (p[j] == 0) continue;
        const double* vj = v.data() + ((hd.b * s.kv_heads + hd.kvh) * s.kv_len + j) * s.v_dim;
        for (int64_t d = 0; d < s.v_dim; ++d) oi[d] += p[j] * vj[d];
      }
    }
  });
  return f;
}

StatusOr<Gradients> backward(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                             const std::vector<double>& v, const MaskView& mask, const AttentionOptions& o,
                             const std::vector<double>& dout) {
  NANPROV_RETURN_IF_ERROR(validate(s, q.size(), k.size(), v.size()));
  if (dout.size() != static_cast<size_t>(s.batch * s.q_heads * s.q_len * s.v_dim)) {
    return Status::Error("reference attention: dO holds a different number of elements than O");
  }
  Gradients g;
  g.dq.assign(q.size(), 0.0);
  g.dk.assign(k.size(), 0.0);
  g.dv.assign(v.size(), 0.0);
  const double scale = scaleOf(s, o);
  std::vector<double> p(static_cast<size_t>(s.kv_len)), dp(static_cast<size_t>(s.kv_len));
  forEachHead(s, [&](const Head& hd) {
    for (int64_t i = 0; i < s.q_len; ++i) {
      logitsOfRow(s, hd, i, q.data(), k, mask, o, scale, p);
      softmaxInPlace(p);
      const int64_t row = (hd.b * s.q_heads + hd.h) * s.q_len + i;
      const double* doi = dout.data() + row * s.v_dim;
      // dP_ij = dO_i · V_j; dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij)
      double weighted = 0;
      for (int64_t j = 0; j < s.kv_len; ++j) {
        if (p[j] == 0) {
          dp[j] = 0;
          continue;
        }
        const int64_t kv_row = (hd.b * s.kv_heads + hd.kvh) * s.kv_len + j;
        const double* vj = v.data() + kv_row * s.v_dim;
        double* dvj = g.dv.data() + kv_row * s.v_dim;
        double dot = 0;
        for (int64_t d = 0; d < s.v_dim; ++d) {
          dot += doi[d] * vj[d];
          dvj[d] += p[j] * doi[d];
        }
        dp[j] = dot;
        weighted += p[j] * dot;
      }
      const double* qi = q.data() + row * s.head_dim;
      double* dqi = g.dq.data() + row * s.head_dim;
      for (int64_t j = 0; j < s.kv_len; ++j) {
        if (p[j] == 0) continue;
        const double ds = p[j] * (dp[j] - weighted) * scale;
        const int64_t kv_row = (hd.b * s.kv_heads + hd.kvh) * s.kv_len + j;
        const double* kj = k.data() + kv_row * s.head_dim;
        double* dkj = g.dk.data() + kv_row * s.head_dim;
        for (int64_t d = 0; d < s.head_dim; ++d) {
          dqi[d] += ds * kj[d];
          dkj[d] += ds * qi[d];
        }
      }
    }
  });
  return g;
}

}  // namespace nanprov::reference
