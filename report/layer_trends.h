// Each layer's trend over the run (issue 50), merged over ranks, and the warnings the ranks said:
// what `report` shows, as text, JSON and the HTML page's plots. The store keeps the trends for
// every call whatever its budget kept (store/trend_keeper.h); this reads a few hundred rows per
// layer and rank, so it costs the report nothing at any run length.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/logit_trend.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

struct LayerTrend {
  int64_t layer = -1;
  std::string module;
  int64_t bucket_steps = 1;        // the widest over ranks: every point stands for this many steps
  std::vector<TrendPoint> points;  // by step; each the largest over ranks
  // Indices into points: the first that holds a logit, and the one with the largest.
  std::optional<size_t> first_logit, peak_logit;
  // The peak logit over the first (0 without a logit, or from a first of 0).
  double growth() const;
};

struct Trends {
  std::vector<LayerTrend> layers;         // by layer
  std::vector<size_t> by_growth;          // indices into layers: those with a logit, most growth first
  int64_t first_step = 0, last_step = 0;  // the steps every layer's points span together
  std::vector<TrendWarning> warnings;     // over ranks, by step then rank
  // The first step whose values went non-finite (an edge or the sentinel's), to say how long
  // before it each warning came; nullopt in a run that stayed finite.
  std::optional<int64_t> nonfinite_step;
};

Trends trendsOf(const store::RunData& run, std::optional<int64_t> nonfinite_step);
nlohmann::json trendsJson(const Trends& trends);
// The warnings, and the layers whose logits grew most, a few lines; "" for a run with no trend
// rows (a store older than them).
std::string trendsText(const Trends& trends);

}  // namespace nanprov::report
