#include "report/layer_trends.h"

#include <algorithm>
#include <map>

#include "base/text.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

void takeLarger(std::optional<double>& into, const std::optional<double>& v) {
  if (v && (!into || *v > *into)) into = v;
}

nlohmann::json orNull(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

std::string stepsBefore(const Trends& trends, const TrendWarning& w) {
  if (!trends.nonfinite_step) return "";
  return " (" + stepsBeforeText(w.step, *trends.nonfinite_step) + ")";
}

}  // namespace

double LayerTrend::growth() const {
  if (!first_logit) return 0;
  const double from = *points[*first_logit].logit;
  return from > 0 ? *points[*peak_logit].logit / from : 0;
}

Trends trendsOf(const store::RunData& run, std::optional<int64_t> nonfinite_step) {
  Trends out;
  out.nonfinite_step = nonfinite_step;
  std::map<int64_t, int64_t> widest;  // layer → bucket steps
  for (const store::RankInfo& r : run.ranks) {
    for (const TrendPoint& p : r.trends) widest[p.layer] = std::max(widest[p.layer], p.bucket_steps);
  }
  // Buckets are aligned powers of two, so a narrower rank's fall wholly inside the widest's.
  std::map<int64_t, std::map<int64_t, TrendPoint>> merged;
  for (const store::RankInfo& r : run.ranks) {
    for (const TrendPoint& p : r.trends) {
      const int64_t width = widest[p.layer];
      const int64_t start = p.step / width * width;
      auto [it, fresh] = merged[p.layer].try_emplace(start, p);
      TrendPoint& m = it->second;
      m.step = start;
      m.bucket_steps = width;
      if (fresh) continue;
      m.last_step = std::max(m.last_step, p.last_step);
      m.calls += p.calls;
      if (m.module.empty()) m.module = p.module;
      if (p.logit && (!m.logit || *p.logit > *m.logit)) {
        m.logit = p.logit;
        m.source = p.source;
        m.scores_dtype = p.scores_dtype;
      }
      takeLarger(m.o, p.o);
      takeLarger(m.dq, p.dq);
      takeLarger(m.dk, p.dk);
      takeLarger(m.dv, p.dv);
    }
    out.warnings.insert(out.warnings.end(), r.trend_warnings.begin(), r.trend_warnings.end());
  }
  for (auto& [layer, points] : merged) {
    LayerTrend t{.layer = layer, .bucket_steps = widest[layer]};
    for (auto& [start, p] : points) {
      if (t.module.empty()) t.module = p.module;
      if (p.logit) {
        if (!t.first_logit) t.first_logit = t.points.size();
        if (!t.peak_logit || *p.logit > *t.points[*t.peak_logit].logit) t.peak_logit = t.points.size();
      }
      out.last_step = std::max(out.last_step, p.last_step);
      t.points.push_back(std::move(p));
    }
    // Points come by step: a layer's first is its earliest.
    out.first_step = out.layers.empty() ? t.points.front().step : std::min(out.first_step, t.points.front().step);
    if (t.first_logit) out.by_growth.push_back(out.layers.size());
    out.layers.push_back(std::move(t));
  }
  std::stable_sort(out.by_growth.begin(), out.by_growth.end(),
                   [&](size_t a, size_t b) { return out.layers[a].growth() > out.layers[b].growth(); });
  std::stable_sort(out.warnings.begin(), out.warnings.end(), [](const TrendWarning& a, const TrendWarning& b) {
    return std::tie(a.step, a.rank, a.layer) < std::tie(b.step, b.rank, b.layer);
  });
  return out;
}

nlohmann::json trendsJson(const Trends& trends) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerTrend& t : trends.layers) {
    nlohmann::json points = nlohmann::json::array();
    for (const TrendPoint& p : t.points) {
      points.push_back({{"step", p.step},
                        {"last_step", p.last_step},
                        {"calls", p.calls},
                        {"logit", orNull(p.logit)},
                        {"logit_source", p.logit ? nlohmann::json(logitSourceName(p.source)) : nlohmann::json(nullptr)},
                        {"scores_dtype",
                         p.logit && !p.scores_dtype.empty() ? nlohmann::json(p.scores_dtype) : nlohmann::json(nullptr)},
                        {"O", orNull(p.o)},
                        {"dQ", orNull(p.dq)},
                        {"dK", orNull(p.dk)},
                        {"dV", orNull(p.dv)}});
    }
    layers.push_back({{"layer", t.layer}, {"module", t.module}, {"bucket_steps", t.bucket_steps}, {"points", points}});
  }
  nlohmann::json warnings = nlohmann::json::array();
  for (const TrendWarning& w : trends.warnings) {
    nlohmann::json before = nullptr;
    if (trends.nonfinite_step) before = *trends.nonfinite_step - w.step;
    warnings.push_back({{"rank", w.rank},
                        {"layer", w.layer},
                        {"module", w.module},
                        {"kind", trendKindName(w.kind)},
                        {"step", w.step},
                        {"value", w.value},
                        {"from_step", w.from_step},
                        {"from_value", w.from_value},
                        {"logit_source", logitSourceName(w.source)},
                        {"scores_dtype", w.scores_dtype},
                        {"steps_before_first_nonfinite", before},
                        {"text", w.text()}});
  }
  return {{"layers", layers},
          {"warnings", warnings},
          {"first_nonfinite_step",
           trends.nonfinite_step ? nlohmann::json(*trends.nonfinite_step) : nlohmann::json(nullptr)}};
}

std::string trendsText(const Trends& trends) {
  if (trends.layers.empty()) return "";
  std::string out;
  constexpr size_t kShownWarnings = 3;
  for (size_t i = 0; i < trends.warnings.size() && i < kShownWarnings; ++i) {
    const TrendWarning& w = trends.warnings[i];
    out += "  trend warning: rank" + std::to_string(w.rank) + " step " + std::to_string(w.step) + ": " + w.text() +
           stepsBefore(trends, w) + "\n";
  }
  if (trends.warnings.size() > kShownWarnings) {
    out += "    and " + std::to_string(trends.warnings.size() - kShownWarnings) +
           " more (report --json: trends.warnings)\n";
  }
  // The layers whose largest logit grew most, from their first point to their peak: where to look.
  if (trends.by_growth.empty()) return out;
  constexpr size_t kShownLayers = 3;
  std::vector<std::string> parts;
  for (size_t i = 0; i < trends.by_growth.size() && i < kShownLayers; ++i) {
    const LayerTrend& t = trends.layers[trends.by_growth[i]];
    const TrendPoint& first = t.points[*t.first_logit];
    const TrendPoint& peak = t.points[*t.peak_logit];
    const std::string who = t.module.empty() ? "layer " + std::to_string(t.layer) : t.module;
    parts.push_back(who + " " + readableNumber(*first.logit) + " at step " + std::to_string(first.step) + ", peak " +
                    readableNumber(*peak.logit) + " at step " + std::to_string(peak.last_step) + " (" +
                    logitSourceName(peak.source) + ")");
  }
  out += "  attention logits, largest per layer: " + joined(parts, "; ");
  if (trends.by_growth.size() > kShownLayers) {
    out += "; " + std::to_string(trends.by_growth.size() - kShownLayers) + " more layers";
  }
  return out + "\n";
}

}  // namespace nanprov::report
