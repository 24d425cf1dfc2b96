#include "cli/layer_trends.h"

#include <algorithm>
#include <map>

#include "base/text.h"

namespace nanprov {
namespace {

void takeLarger(std::optional<double>& into, const std::optional<double>& v) {
  if (v && (!into || *v > *into)) into = v;
}

nlohmann::json orNull(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// The first point that holds a logit, and the one with the largest; nullopt when none holds one.
std::optional<std::pair<const TrendPoint*, const TrendPoint*>> firstAndPeak(const LayerTrend& t) {
  const TrendPoint *first = nullptr, *peak = nullptr;
  for (const TrendPoint& p : t.points) {
    if (!p.logit) continue;
    if (!first) first = &p;
    if (!peak || *p.logit > *peak->logit) peak = &p;
  }
  if (!first) return std::nullopt;
  return std::make_pair(first, peak);
}

std::string stepsBefore(const Trends& trends, const TrendWarning& w) {
  if (!trends.nonfinite_step) return "";
  const int64_t before = *trends.nonfinite_step - w.step;
  if (before <= 0) return " (at or after the first non-finite value)";
  return " (" + std::to_string(before) + (before == 1 ? " step" : " steps") + " before the first non-finite value)";
}

}  // namespace

Trends trendsOf(const RunData& run, std::optional<int64_t> nonfinite_step) {
  Trends out;
  out.nonfinite_step = nonfinite_step;
  std::map<int64_t, int64_t> widest;  // layer → bucket steps
  for (const RankInfo& r : run.ranks) {
    for (const TrendPoint& p : r.trends) widest[p.layer] = std::max(widest[p.layer], p.bucket_steps);
  }
  // Buckets are aligned powers of two, so a narrower rank's fall wholly inside the widest's.
  std::map<int64_t, std::map<int64_t, TrendPoint>> merged;
  for (const RankInfo& r : run.ranks) {
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
      t.points.push_back(std::move(p));
    }
    out.layers.push_back(std::move(t));
  }
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
                        {"scores_dtype", p.logit && !p.scores_dtype.empty() ? nlohmann::json(p.scores_dtype) : nlohmann::json(nullptr)},
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
  return {{"layers", layers}, {"warnings", warnings}, {"first_nonfinite_step", trends.nonfinite_step ? nlohmann::json(*trends.nonfinite_step) : nlohmann::json(nullptr)}};
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
  struct Growth {
    const LayerTrend* layer;
    const TrendPoint *first, *peak;
    double ratio;
  };
  std::vector<Growth> growth;
  for (const LayerTrend& t : trends.layers) {
    auto ends = firstAndPeak(t);
    if (!ends) continue;
    const double from = *ends->first->logit, to = *ends->second->logit;
    growth.push_back({&t, ends->first, ends->second, from > 0 ? to / from : 0});
  }
  if (growth.empty()) return out;
  std::stable_sort(growth.begin(), growth.end(), [](const Growth& a, const Growth& b) { return a.ratio > b.ratio; });
  constexpr size_t kShownLayers = 3;
  std::vector<std::string> parts;
  for (size_t i = 0; i < growth.size() && i < kShownLayers; ++i) {
    const Growth& g = growth[i];
    const std::string who = g.layer->module.empty() ? "layer " + std::to_string(g.layer->layer) : g.layer->module;
    parts.push_back(who + " " + readableNumber(*g.first->logit) + " at step " + std::to_string(g.first->step) +
                    ", peak " + readableNumber(*g.peak->logit) + " at step " + std::to_string(g.peak->last_step) +
                    " (" + logitSourceName(g.peak->source) + ")");
  }
  out += "  attention logits, largest per layer: " + joined(parts, "; ");
  if (growth.size() > kShownLayers) out += "; " + std::to_string(growth.size() - kShownLayers) + " more layers";
  return out + "\n";
}

}  // namespace nanprov
