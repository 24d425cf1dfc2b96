#include "report/trend_plots.h"

#include <gtest/gtest.h>

namespace nanprov::report {
namespace {

LayerTrend layer() {
  LayerTrend t{.layer = 0, .module = "layers.0<script>"};
  for (int64_t step : {0, 4, 8}) {
    TrendPoint p;
    p.layer = 0, p.step = step, p.last_step = step, p.calls = 1, p.module = t.module;
    p.logit = 10.0 * (step + 1);
    p.o = 1.0;
    t.points.push_back(p);
  }
  t.first_logit = 0, t.peak_logit = 2;
  return t;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A line per measure the layer has, a dashed orange line per warning and a red one at the first
// non-finite step; and no text from the store, so the page needs no escaping for it.
TEST(TrendPlots, DrawTheMeasuresAndMarkTheWarningsAndTheFirstNonFiniteStep) {
  const std::string svg =
      trendPlotSvg(layer(), PlotFrame{.first_step = 0, .last_step = 8, .nonfinite_step = 8, .warning_steps = {4}});
  EXPECT_EQ(svg.rfind("<svg class=\"trend\"", 0), 0u);
  EXPECT_EQ(count(svg, "<polyline"), 2u) << "the logit and |O|: no gradient was kept";
  EXPECT_NE(svg.find("<title>trend warning at step 4</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>first non-finite value at step 8</title>"), std::string::npos);
  EXPECT_EQ(svg.find("layers.0"), std::string::npos);
  const std::string quiet = trendPlotSvg(layer(), PlotFrame{.first_step = 0, .last_step = 8});
  EXPECT_EQ(quiet.find("trend warning"), std::string::npos);
  EXPECT_EQ(quiet.find("first non-finite"), std::string::npos);
  EXPECT_NE(trendPlotLegend().find("first non-finite value"), std::string::npos);
}

}  // namespace
}  // namespace nanprov::report
