// The HTML page's small plot of one layer's trend (issue 50): steps on x, log10 |x| on y, the
// largest attention logit, |O| and the largest gradient (dQ, dK, dV), with the first non-finite
// step and the layer's warnings marked. Inline SVG with no text from the store in it, so it needs
// no escaping, and nothing for the page's Content-Security-Policy to refuse.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/layer_trends.h"

namespace nanprov::report {

struct PlotFrame {
  int64_t first_step = 0, last_step = 0;  // the x axis, shared by every layer's plot
  std::optional<int64_t> nonfinite_step;  // a red line
  std::vector<int64_t> warning_steps;     // orange lines
};

std::string trendPlotSvg(const LayerTrend& trend, const PlotFrame& frame);

// The legend under the plots, in the plots' colours.
std::string trendPlotLegend();

}  // namespace nanprov::report
