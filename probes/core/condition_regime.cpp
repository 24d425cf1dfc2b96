#include "probes/core/condition_regime.h"

#include <cmath>
#include <cstdio>

namespace nanprov::probes {
namespace {

const TensorHealth* healthOf(const CallEvent& rec, Role role) {
  for (const TensorHealth& t : rec.tensors) {
    if (t.role == role) return &t;
  }
  return nullptr;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A magnitude left its regime: it appeared or went, became zero or non-zero, or changed tenfold.
bool moved(const std::optional<double>& judged, const std::optional<double>& now) {
  if (judged.has_value() != now.has_value()) return true;
  if (!judged) return false;
  if ((*judged == 0) != (*now == 0)) return true;
  if (*judged == 0) return false;
  return std::fabs(std::log10(*now) - std::log10(*judged)) >= 1.0;
}

std::string magnitude(const std::optional<double>& v) { return v ? number(*v) : std::string("none"); }

}  // namespace

ConditionRegime regimeOf(const CallEvent& rec) {
  ConditionRegime r;
  if (const TensorHealth* mask = healthOf(rec, Role::kMask)) {
    r.masked_rows = mask->masked_rows > 0;
    // A bool mask has no magnitude (max_abs stays 0 for it); its hidden rows are counted above.
    if (mask->dtype != "Bool") r.mask = mask->max_abs;
  }
  if (const TensorHealth* lse = healthOf(rec, Role::kLSE)) r.lse_past_limit = lse->max_abs > kRegimeLseLimit;
  if (const TensorHealth* s = healthOf(rec, Role::kS)) {
    r.logits = s->max_abs;
  } else {
    const TensorHealth* q = healthOf(rec, Role::kQ);
    const TensorHealth* k = healthOf(rec, Role::kK);
    if (q && k) r.logits = q->max_abs * k->max_abs;
  }
  if (const TensorHealth* o = healthOf(rec, Role::kO)) {
    r.output = o->max_abs;
    r.output_zero = o->all_zero;
  }
  return r;
}

bool sameRegime(const ConditionRegime& judged, const ConditionRegime& now) {
  return !moved(judged.mask, now.mask) && judged.masked_rows == now.masked_rows &&
         judged.lse_past_limit == now.lse_past_limit && !moved(judged.logits, now.logits) &&
         judged.output_zero == now.output_zero && !moved(judged.output, now.output);
}

std::string regimeText(const ConditionRegime& r) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (r.mask) add("mask |x| " + number(*r.mask));
  if (r.masked_rows) add("rows fully masked");
  if (r.lse_past_limit) add("|LSE| past 88.7");
  if (r.logits) add("logits " + number(*r.logits));
  if (r.output_zero) add("O zero");
  else if (r.output) add("O " + number(*r.output));
  return out.empty() ? "no magnitude measured" : out;
}

std::string regimeChange(const ConditionRegime& judged, const ConditionRegime& now) {
  if (moved(judged.mask, now.mask)) {
    return "the mask's largest |x| went from " + magnitude(judged.mask) + " to " + magnitude(now.mask);
  }
  if (judged.masked_rows != now.masked_rows) {
    return now.masked_rows ? "query rows with every key masked appeared" : "no query row has every key masked any more";
  }
  if (judged.lse_past_limit != now.lse_past_limit) {
    return now.lse_past_limit ? "a row's |LSE| went past 88.7 (exp(-LSE) leaves float32)"
                              : "every row's |LSE| came back within 88.7";
  }
  if (moved(judged.logits, now.logits)) {
    return "the logits' bound went from " + magnitude(judged.logits) + " to " + magnitude(now.logits);
  }
  if (judged.output_zero != now.output_zero)
    return now.output_zero ? "the output became exactly zero" : "the output is no longer zero";
  if (moved(judged.output, now.output)) {
    return "the output's largest |x| went from " + magnitude(judged.output) + " to " + magnitude(now.output);
  }
  return "";
}

}  // namespace nanprov::probes
