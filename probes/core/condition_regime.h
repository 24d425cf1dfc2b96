// The conditions a call ran under, as coarse as the faults that depend on them (issue 63): a
// silent-wrong kernel starts when the data changes (a mask value arrives, rows lose every key, a
// row's LSE falls past −88.7, logits grow), so the audit judges a call again whenever its
// conditions leave the regime it was last judged in. Read from the health the device checks
// already measured for every role (base/records/call_record.h's TensorHealth): no extra pass
// over Q, K or V, no host sync. Shape, layout and dtype are in the audit key itself.
//
// Coarse on purpose, so a clean run does not judge every step: a magnitude moves the regime only
// when it changed tenfold since the judgement (a value hovering at a decade's edge does not flap),
// a zero becoming non-zero (a mask band appearing), rows going from none to some fully masked,
// and a row's |LSE| crossing 88.7 (the checks measure |LSE|, not its sign: below −88.7, the seed-004
// line, and huge logits alike). A regime a key was judged in before is not new again: a padding
// mask present in some batches and not others is judged once in each.
#pragma once

#include <optional>
#include <string>

#include "base/records/call_event.h"

namespace nanprov::probes {

struct ConditionRegime {
  std::optional<double> mask;    // the additive mask's largest finite |x|; none: no float mask
  bool masked_rows = false;      // some query row sees no key
  bool lse_past_limit = false;   // a row's |LSE| is beyond 88.7 (exp(-LSE) leaves float32)
  std::optional<double> logits;  // the scores' largest |x| where seen, else max|Q|·max|K|
  std::optional<double> output;  // O's largest finite |x|
  bool output_zero = false;      // O exactly zero
};

inline constexpr double kRegimeLseLimit = 88.7;

ConditionRegime regimeOf(const CallEvent& rec);

// What moved `now` out of the regime `judged` was in, in words for the audit's finding ("the
// mask's largest |x| went from 0 to 3e+04"); empty when it is the same regime.
std::string regimeChange(const ConditionRegime& judged, const ConditionRegime& now);
// Whether `now` is in the regime `judged` was in: regimeChange's test, without its words (asked at
// every audited call).
bool sameRegime(const ConditionRegime& judged, const ConditionRegime& now);

// The regime in words, for the report's coverage: "mask |x| 3e+04, rows fully masked, |LSE| past
// 88.7, logits 12.5, O 1.02" (only what the call had; each magnitude stands for its decade).
std::string regimeText(const ConditionRegime& r);

}  // namespace nanprov::probes
