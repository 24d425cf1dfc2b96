// The warning before the NaN (issue 50): a layer's largest attention logit, followed call by call,
// and the rule that says when its growth is worth a warning. A trend, not a verdict: the rule says
// what preceded instabilities in published large runs and in ours (docs/trends.md), and a run it
// warns about may still train.
//
// One call's logit comes from what the probes measured, best first:
//   - S, the scores of attention written in plain ops: its largest value is the largest logit;
//   - LSE, which fused kernels return: max logit <= LSE <= max logit + log(keys), so its largest
//     value follows the largest logit once logits dominate log(keys) (about 3.5 for 32 keys);
//   - otherwise a bound: |q . k| / sqrt(d) <= sqrt(d) |Q|max |K|max, an upper bound, often 2-5x.
// A mask's fills are not logits (issue 61): masks hide keys with values below 0 (-inf, finfo.min,
// -1e9, diffusers' -10000 on every key of a dropped caption), so S and LSE are read by their
// largest value above 0 (TensorHealth::max_positive). Where only their largest |x| was measured
// (the CUDA checks), a value that may be a fill gives way to the bound. A call with no logit above
// 0 says nothing of growth, and no arithmetic here overflows on float64 extremes.
//
// The rule, per layer (LogitWatch::observe):
//   - growth: the logit reached kGrowthLevel (1,000) and is kGrowthFactor (10x) or more above the
//     smallest value the layer showed before. Healthy models sit far below: QK-Clip (Kimi K2) caps
//     logits at 100, our stable runs stayed under 100, and the diverging runs of Dehghani et al.
//     2023 and Wortsman et al. 2023 and ours went past 1,000 on the way.
//   - precision: the scores are held in a 16-bit type (plain-ops attention's S, or the MATH
//     backend, which computes in the input's type) and reached the value where neighbouring
//     scores are 2 apart: 256 in bfloat16, 2,048 in float16 (32x from its overflow at 65,504).
//     Fused kernels compute scores in float32: this part never applies to them.
// Each kind warns once per layer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"

namespace nanprov {

inline constexpr double kGrowthLevel = 1000.0;
inline constexpr double kGrowthFactor = 10.0;

enum class LogitSource { kScores, kLse, kBound };
const char* logitSourceName(LogitSource s);  // "scores" | "lse" | "bound"
std::optional<LogitSource> parseLogitSource(const std::string& text);

// One forward call's largest attention logit, and the type its scores were held in.
struct CallLogit {
  double value = 0;
  LogitSource source = LogitSource::kLse;
  std::string scores_dtype;  // LibTorch's C++ name: "Float", "BFloat16", "Half"
};

// nullopt for a backward call, or a forward call that holds none of S, LSE, or Q and K.
std::optional<CallLogit> callLogit(const CallRecord& call);

// The value at which neighbouring scores of `dtype` are 2 apart; nullopt for 32-bit and wider.
std::optional<double> coarseScoresFrom(const std::string& dtype);

enum class TrendKind { kGrowth, kPrecision };
const char* trendKindName(TrendKind k);  // "growth" | "precision"
std::optional<TrendKind> parseTrendKind(const std::string& text);

struct TrendWarning {
  int rank = 0;
  int64_t layer = -1;
  std::string module;
  TrendKind kind = TrendKind::kGrowth;
  int64_t step = 0;       // the step of the call that crossed the line
  double value = 0;       // its logit
  int64_t from_step = 0;  // growth: the step of the smallest value before
  double from_value = 0;
  LogitSource source = LogitSource::kLse;
  std::string scores_dtype;
  // Live only (the writer's, store/trend_keeper.h): the step of the rank's first non-finite value,
  // once it came, so the line said while training tells how long before it the warning came. The
  // report reads its own (report/layer_trends.h).
  std::optional<int64_t> nonfinite_step;

  // "layers.7.attn attention logits grew from 14 to 9,800 over 300 steps (x700)", or for
  // precision "... reached 300 in bfloat16 scores, where neighbouring scores are 2 apart".
  std::string text() const;
};

// One bucket of one layer's trend, as the store keeps it (store/trend_keeper.h): its calls' largest
// logit and |x| of O, dQ, dK, dV (nullopt: no call of the bucket held that tensor).
struct TrendPoint {
  int64_t layer = -1;
  int64_t step = 0, last_step = 0;  // the bucket's first step (aligned) and the last step seen in it
  int64_t bucket_steps = 1;
  int64_t calls = 0;
  std::string module;
  std::optional<double> logit;
  LogitSource source = LogitSource::kLse;
  std::string scores_dtype;
  std::optional<double> o, dq, dk, dv;
};

// One layer's logits in call order; says each kind of warning once.
class LogitWatch {
 public:
  std::vector<TrendWarning> observe(int64_t step, const CallLogit& logit);
  bool warned(TrendKind k) const { return warned_[static_cast<int>(k)]; }

 private:
  bool seen_ = false;
  double smallest_ = 0;
  int64_t smallest_step_ = 0;
  bool warned_[2] = {false, false};
};

// How long before the first non-finite value a warning of `warned_step` came: "18 steps before
// the first non-finite value" (or "1 step"), or "at or after the first non-finite value". The
// report and the live line say it alike.
std::string stepsBeforeText(int64_t warned_step, int64_t nonfinite_step);

// 9800 → "9,800"; 0.25 → "0.25"; 3.4e7 → "34,000,000": a figure a person reads at a glance.
std::string readableNumber(double v);

}  // namespace nanprov
