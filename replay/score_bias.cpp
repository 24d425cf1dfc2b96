#include "replay/score_bias.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/text.h"

namespace nanprov::replay {
namespace {

constexpr const char* kPlainOpsAttention = "softmax_attention";
// How close a slope must be to 1 or 1/sqrt(d) to be taken as it: S and the product were rounded
// to the input's dtype (float16 keeps about three decimal digits).
constexpr double kSnap = 1e-2;

// The product Q·Kᵀ as the run computed it, in the input dtype: a bmm, scaled afterwards; or a
// baddbmm that scaled it by alpha before rounding.
at::Tensor productAsRun(const CapturedCall& call, bool baddbmm) {
  const at::Tensor& q = call.at("Q");
  const at::Tensor& k = call.at("K");
  if (!baddbmm) return at::matmul(q, k.transpose(-2, -1));
  at::Tensor q3 = q.reshape({-1, call.s_q, call.head_dim}), k3 = k.reshape({-1, call.s_kv, call.head_dim});
  at::Tensor zeros = at::zeros({q3.size(0), call.s_q, call.s_kv}, q.options());
  return at::baddbmm(zeros, q3, k3.transpose(1, 2), 0.0, *call.scale)
      .view({call.batch, call.q_heads, call.s_q, call.s_kv});
}

// One unit in the last place at 1 for `type`: how much rounding a value of that dtype carries.
double epsilonOf(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return 1.0 / 1024;
    case at::kBFloat16: return 1.0 / 128;
    case at::kFloat: return std::numeric_limits<float>::epsilon();
    default: return std::numeric_limits<double>::epsilon();
  }
}

// The largest finite value of a floating `type`: where a product computed in it overflows.
double largestFinite(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::max());
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
    case at::kFloat: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

// Where the run's own product could have overflowed: its partial sums are bounded by Σ|q||k|, so
// past the largest finite value it was held in the kernel may have made ±inf there, depending on
// the order it summed in, and another kernel (the replay's, or cuBLAS on another device) may not:
// an inf in S there is the call's own, no bias. A matmul rounds the product to Q's dtype before
// it is scaled; a baddbmm accumulates in float32 (or double) and rounds once, scaled by alpha.
at::Tensor mayHaveOverflowed(const CapturedCall& call, at::ScalarType scores_type, bool baddbmm) {
  const at::ScalarType q_type = call.at("Q").scalar_type();
  at::Tensor q = call.at("Q").to(at::kDouble).abs(), k = call.at("K").to(at::kDouble).abs();
  at::Tensor bound = at::matmul(q, k.transpose(-2, -1));
  const double held_max = largestFinite(baddbmm && q_type != at::kDouble ? at::kFloat : q_type);
  return (bound >= held_max) | (bound * std::abs(*call.scale) >= largestFinite(scores_type));
}

}  // namespace

std::optional<double> scaleOfScores(const at::Tensor& s, const at::Tensor& r, int64_t head_dim) {
  at::Tensor s64 = s.to(at::kDouble), r64 = r.to(at::kDouble);
  at::Tensor both = at::isfinite(s64) & at::isfinite(r64);
  at::Tensor count = both.sum(-1, true).to(at::kDouble);
  at::Tensor sz = at::where(both, s64, 0.0), rz = at::where(both, r64, 0.0);
  at::Tensor ds = at::where(both, s64 - sz.sum(-1, true) / count.clamp_min(1), 0.0);
  at::Tensor dr = at::where(both, r64 - rz.sum(-1, true) / count.clamp_min(1), 0.0);
  // Rows with a single finite score (every other overflowed) say nothing centred: then S's plain
  // ratio to the product, which a bias would bend.
  double den = (dr * dr).sum().item<double>(), num = (ds * dr).sum().item<double>();
  if (!(den > 0)) {
    den = (rz * rz).sum().item<double>();
    num = (sz * rz).sum().item<double>();
  }
  if (!(den > 0)) return std::nullopt;
  const double slope = num / den;
  for (double usual : {1.0, 1.0 / std::sqrt(static_cast<double>(head_dim))}) {
    if (std::abs(slope - usual) <= kSnap * usual) return usual;
  }
  return slope;
}

Status deriveScoreBias(CapturedCall& call) {
  if (call.metaOr("op") != kPlainOpsAttention) return Status::Ok();
  const bool from_p = !call.has("S");
  if (from_p && !call.has("P"))
    return Status::Error("a capture of attention written in plain ops holds neither S nor P");
  const std::vector<int64_t> full = {call.batch, call.q_heads, call.s_q, call.s_kv};
  at::Tensor s = from_p ? call.at("P") : call.at("S");
  if (s.sizes() != at::IntArrayRef(full)) {
    return Status::Error(std::string(from_p ? "P" : "S") + " is not [batch, heads, s_q, s_kv]");
  }
  // log P is S less a row constant, which no softmax sees.
  at::Tensor s64 = from_p ? s.to(at::kDouble).log() : s.to(at::kDouble);
  const bool baddbmm = call.metaOr("arg.scores_by") == "baddbmm";
  if (baddbmm && !call.scale) return Status::Error("a baddbmm capture without its alpha (arg.scale)");
  at::Tensor r64 = productAsRun(call, baddbmm).to(at::kDouble);
  std::string how = "its alpha";
  if (baddbmm) {
    r64 = r64 / *call.scale;  // the bias below is S less alpha times this
  } else if (std::optional<double> slope = scaleOfScores(s64, r64, call.head_dim)) {
    call.scale = *slope;
    how = "S's slope against Q·Kᵀ";
  } else {
    call.scale = 1.0 / std::sqrt(static_cast<double>(call.head_dim));
    how = "none in S (no finite score), so 1/sqrt(head_dim)";
  }
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor scaled = r64 * *call.scale;
  at::Tensor bias = s64 - scaled;
  if (from_p) {
    // log P carries its row's constant: each row's largest finite term is taken as its 0.
    at::Tensor top = at::where(at::isfinite(bias), bias, -inf).amax(-1, true);
    bias = bias - at::where(at::isfinite(top), top, 0.0);
  }
  // What the run's rounding left is no bias: S is the scaled product rounded to S's dtype, or the
  // product's (a softmax upcast to float32 reads float16 scores).
  const double eps = std::max(epsilonOf(s.scalar_type()), epsilonOf(call.at("Q").scalar_type()));
  bias = at::where(bias.abs() <= 4 * eps * scaled.abs(), 0.0, bias);
  // Where the run's own product overflowed, or could have in the order its kernel summed, S is no
  // measure of a bias: the call made that value. Elsewhere -inf in S where the product was not
  // -inf is a hidden key (masked_fill).
  const at::Tensor own_overflow =
      at::logical_not(at::isfinite(s64)) & mayHaveOverflowed(call, s.scalar_type(), baddbmm);
  bias = at::where(at::isfinite(r64) & at::logical_not(own_overflow), bias, 0.0);
  bias = at::where((s64 == -inf) & (r64 != -inf) & at::logical_not(own_overflow), -inf, bias);
  const bool any_bias = (bias != 0).any().item<bool>();
  call.tensors.erase("S");
  call.tensors.erase("P");
  std::string note = "attention written in plain ops: scale " + shortNumber(*call.scale) + " (" + how + ")";
  if (any_bias) {
    // In the query's dtype, as SDPA would be handed it: a mask dtype of nanprov's own choosing
    // must not look like the run's (known issues match on a float32 mask with half queries).
    call.tensors["mask"] = bias.to(call.at("Q").scalar_type());
    note += ", and the additive bias its scores carried (" + std::string(from_p ? "log P" : "S") +
            " less the scaled Q·Kᵀ), materialised by nanprov";
  } else {
    note += "; its scores carried no bias";
  }
  call.meta["replay.note"] = call.metaOr("replay.note").empty() ? note : call.metaOr("replay.note") + "; " + note;
  return Status::Ok();
}

}  // namespace nanprov::replay
