#include "base/logit_trend.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "base/records/dtype.h"
#include "base/text.h"

namespace nanprov {
namespace {

// The call's tensor of `role` when it held a finite value: a tensor all NaN says nothing of the
// size of what it would have held (its max_abs is 0).
const TensorHealth* roleOf(const CallRecord& call, Role role) {
  for (const TensorHealth& t : call.tensors) {
    if (t.role == role) return t.numel > t.nonfinite() ? &t : nullptr;
  }
  return nullptr;
}

// The largest finite value of a floating type; a score near it is a mask's fill.
double largestFinite(const std::string& dtype) {
  if (dtype == "Half") return 65504.0;
  if (dtype == "Float" || dtype == "BFloat16") return 3.4e38;
  return std::numeric_limits<double>::max();  // float64, and what is not named: never an overflow here
}

// The largest finite |x| of the call's float mask (an additive mask's fill: -1e4, -1e9,
// finfo.min); 0 for a bool mask or none.
double maskFill(const CallRecord& call) {
  const TensorHealth* mask = roleOf(call, Role::kMask);
  return mask ? mask->max_abs : 0.0;
}

// What q . k can reach for the call's Q and K, d |Q|max |K|max (with any scale up to 1): plain-ops
// scores above it hold something added to the product, a mask's fill. Infinity when unknown.
double productCeiling(const CallRecord& call) {
  const TensorHealth* q = roleOf(call, Role::kQ);
  const TensorHealth* k = roleOf(call, Role::kK);
  if (!q || !k || q->shape.ndim == 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(q->shape.dims[q->shape.ndim - 1]) * q->max_abs * k->max_abs;
}

// The largest logit `t` (S or LSE) shows, masks or not: its largest value above 0 where the check
// measured it; otherwise its largest |x|, unless that may be a mask's fill (near the dtype's limit,
// as large as half the call's additive mask, or, for S, past what Q and K can make): nullopt then,
// and the bound stands in.
std::optional<double> largestLogit(const CallRecord& call, const TensorHealth& t) {
  if (!std::isnan(t.max_positive)) return t.max_positive;
  if (t.max_abs >= 0.5 * largestFinite(t.dtype.str())) return std::nullopt;
  if (const double fill = maskFill(call); fill > 0 && t.max_abs >= 0.5 * fill) return std::nullopt;
  if (t.role == Role::kS && t.max_abs > productCeiling(call)) return std::nullopt;
  return t.max_abs;
}

}  // namespace

const char* logitSourceName(LogitSource s) {
  switch (s) {
    case LogitSource::kScores: return "scores";
    case LogitSource::kLse: return "lse";
    case LogitSource::kBound: return "bound";
  }
  return "lse";
}

std::optional<LogitSource> parseLogitSource(const std::string& text) {
  for (LogitSource s : {LogitSource::kScores, LogitSource::kLse, LogitSource::kBound}) {
    if (text == logitSourceName(s)) return s;
  }
  return std::nullopt;
}

const char* trendKindName(TrendKind k) { return k == TrendKind::kGrowth ? "growth" : "precision"; }

std::optional<TrendKind> parseTrendKind(const std::string& text) {
  if (text == "growth") return TrendKind::kGrowth;
  if (text == "precision") return TrendKind::kPrecision;
  return std::nullopt;
}

std::optional<CallLogit> callLogit(const CallRecord& call) {
  if (call.phase != Phase::kForward) return std::nullopt;
  // A logit of 0 or below (every key masked, or no score above 0) says nothing of growth.
  auto positive = [](CallLogit l) { return l.value > 0 ? std::optional<CallLogit>(l) : std::nullopt; };
  const TensorHealth* s = roleOf(call, Role::kS);
  if (s) {
    if (std::optional<double> v = largestLogit(call, *s)) return positive({*v, LogitSource::kScores, s->dtype.str()});
  }
  const TensorHealth* q = roleOf(call, Role::kQ);
  // The MATH backend computes its scores in the inputs' type; fused kernels in float32.
  const std::string scores = call.backend == "math" && q ? q->dtype.str() : std::string("Float");
  if (const TensorHealth* lse = roleOf(call, Role::kLSE)) {
    if (std::optional<double> v = largestLogit(call, *lse)) return positive({*v, LogitSource::kLse, scores});
  }
  const TensorHealth* k = roleOf(call, Role::kK);
  if (!q || !k || q->shape.ndim == 0) return std::nullopt;
  const double d = static_cast<double>(q->shape.dims[q->shape.ndim - 1]);
  // float64 inputs near their limit: a bound past the largest double says nothing.
  const double bound = std::sqrt(d) * q->max_abs * k->max_abs;
  if (!std::isfinite(bound)) return std::nullopt;
  return positive({bound, LogitSource::kBound, s ? s->dtype.str() : scores});
}

std::optional<double> coarseScoresFrom(const std::string& dtype) {
  if (dtype == "BFloat16") return 256.0;  // 8 significant bits: [256, 512) is spaced 2
  if (dtype == "Half") return 2048.0;     // 11 significant bits: [2048, 4096) is spaced 2
  return std::nullopt;
}

std::string TrendWarning::text() const {
  const std::string who = module.empty() ? "layer " + std::to_string(layer) : module;
  const char* what =
      source == LogitSource::kBound ? " attention logits (a bound from |Q| and |K|)" : " attention logits";
  if (kind == TrendKind::kGrowth) {
    // The factor of a tiny start can pass the largest double: then it is not said.
    const double factor = from_value > 0 ? value / from_value : 0;
    const std::string times = factor > 0 && std::isfinite(factor) ? " (x" + readableNumber(factor) + ")" : "";
    return who + what + " grew from " + readableNumber(from_value) + " to " + readableNumber(value) + " over " +
           std::to_string(step - from_step) + " steps" + times;
  }
  std::string out = who + what + " reached " + readableNumber(value) + " in " + torchDtypeName(scores_dtype) +
                    " scores, where neighbouring scores are 2 apart";
  if (scores_dtype == "Half") out += " and overflow (65,504) is x" + readableNumber(65504.0 / value) + " away";
  return out;
}

std::vector<TrendWarning> LogitWatch::observe(int64_t step, const CallLogit& logit) {
  std::vector<TrendWarning> out;
  if (!std::isfinite(logit.value) || logit.value <= 0) return out;  // says nothing of growth
  auto warning = [&](TrendKind kind) {
    TrendWarning w;
    w.kind = kind;
    w.step = step;
    w.value = logit.value;
    w.from_step = smallest_step_;
    w.from_value = smallest_;
    w.source = logit.source;
    w.scores_dtype = logit.scores_dtype;
    warned_[static_cast<int>(kind)] = true;
    return w;
  };
  // Divided, not multiplied: a float64 layer's smallest may be near the largest double.
  if (seen_ && !warned(TrendKind::kGrowth) && logit.value >= kGrowthLevel && logit.value / kGrowthFactor >= smallest_) {
    out.push_back(warning(TrendKind::kGrowth));
  }
  if (std::optional<double> coarse = coarseScoresFrom(logit.scores_dtype);
      coarse && !warned(TrendKind::kPrecision) && logit.value >= *coarse) {
    out.push_back(warning(TrendKind::kPrecision));
  }
  if (!seen_ || logit.value < smallest_) {
    smallest_ = logit.value;
    smallest_step_ = step;
  }
  seen_ = true;
  return out;
}

std::string stepsBeforeText(int64_t warned_step, int64_t nonfinite_step) {
  const int64_t before = nonfinite_step - warned_step;
  if (before <= 0) return "at or after the first non-finite value";
  return std::to_string(before) + (before == 1 ? " step" : " steps") + " before the first non-finite value";
}

std::string readableNumber(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  const double a = std::fabs(v);
  if (a < 10) return shortNumber(v);
  if (a >= 1e15) return shortNumber(v);
  // Two significant digits past 100 (9,800; 1,700), then thousands separators.
  double rounded = v;
  if (a >= 100) {
    const double unit = std::pow(10.0, std::floor(std::log10(a)) - 1);
    rounded = std::round(v / unit) * unit;
  } else {
    rounded = std::round(v);
  }
  char digits[32];
  std::snprintf(digits, sizeof digits, "%.0f", std::fabs(rounded));
  std::string s = digits, out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return (rounded < 0 ? "-" : "") + out;
}

}  // namespace nanprov
