#include "report/trend_plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "base/logit_trend.h"

namespace nanprov::report {
namespace {

constexpr double kWidth = 320, kHeight = 96, kLeft = 44, kRight = 6, kTop = 6, kBottom = 16;

struct Series {
  const char* name;
  const char* colour;
  double width;
  std::function<std::optional<double>(const TrendPoint&)> value;
};

const std::vector<Series>& series() {
  static const std::vector<Series> all = {
      {"attention logit", "#1a73e8", 2.0, [](const TrendPoint& p) { return p.logit; }},
      {"|O|", "#188038", 1.2, [](const TrendPoint& p) { return p.o; }},
      {"largest of |dQ| |dK| |dV|", "#80868b", 1.2,
       [](const TrendPoint& p) {
         std::optional<double> g;
         for (const std::optional<double>& v : {p.dq, p.dk, p.dv}) {
           if (v && (!g || *v > *g)) g = v;
         }
         return g;
       }},
  };
  return all;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string trendPlotSvg(const LayerTrend& trend, const PlotFrame& frame) {
  // log10 of every positive value drawn: the y range.
  double lo = INFINITY, hi = -INFINITY;
  for (const TrendPoint& p : trend.points) {
    for (const Series& s : series()) {
      if (auto v = s.value(p); v && *v > 0) {
        lo = std::min(lo, std::log10(*v));
        hi = std::max(hi, std::log10(*v));
      }
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  lo = std::floor(lo);
  hi = std::max(std::ceil(hi), lo + 1);
  const double span = static_cast<double>(std::max<int64_t>(frame.last_step - frame.first_step, 1));
  auto x = [&](double step) {
    return kLeft + (step - static_cast<double>(frame.first_step)) / span * (kWidth - kLeft - kRight);
  };
  auto y = [&](double v) { return kTop + (hi - std::log10(v)) / (hi - lo) * (kHeight - kTop - kBottom); };

  std::string out = "<svg class=\"trend\" width=\"" + number(kWidth) + "\" height=\"" + number(kHeight) +
                    "\" viewBox=\"0 0 " + number(kWidth) + " " + number(kHeight) + "\" role=\"img\">\n";
  out += "<rect x=\"" + number(kLeft) + "\" y=\"" + number(kTop) + "\" width=\"" + number(kWidth - kLeft - kRight) +
         "\" height=\"" + number(kHeight - kTop - kBottom) + "\" fill=\"#fafafa\" stroke=\"#dadce0\"/>\n";
  // Decades on the y axis, labelled 1e<k>: at most 5 of them, so 1e-10 to 1e5 stays legible.
  const int every = std::max(1, static_cast<int>(std::ceil((hi - lo) / 4)));
  for (int k = static_cast<int>(lo); k <= static_cast<int>(hi); k += every) {
    const double yy = y(std::pow(10.0, k));
    out += "<line x1=\"" + number(kLeft) + "\" x2=\"" + number(kWidth - kRight) + "\" y1=\"" + number(yy) + "\" y2=\"" +
           number(yy) + "\" stroke=\"#eee\"/><text x=\"" + number(kLeft - 3) + "\" y=\"" + number(yy + 3) +
           "\" font-size=\"9\" text-anchor=\"end\" fill=\"#5f6368\">1e" + std::to_string(k) + "</text>\n";
  }
  out += "<text x=\"" + number(kLeft) + "\" y=\"" + number(kHeight - 3) + "\" font-size=\"9\" fill=\"#5f6368\">step " +
         std::to_string(frame.first_step) + "</text><text x=\"" + number(kWidth - kRight) + "\" y=\"" +
         number(kHeight - 3) + "\" font-size=\"9\" text-anchor=\"end\" fill=\"#5f6368\">" +
         std::to_string(frame.last_step) + "</text>\n";
  auto vertical = [&](int64_t step, const char* colour, const char* dash, const std::string& title) {
    const double xx = x(static_cast<double>(step));
    return "<line x1=\"" + number(xx) + "\" x2=\"" + number(xx) + "\" y1=\"" + number(kTop) + "\" y2=\"" +
           number(kHeight - kBottom) + "\" stroke=\"" + colour + "\" stroke-width=\"1.5\"" + dash + "><title>" + title +
           "</title></line>\n";
  };
  for (int64_t step : frame.warning_steps) {
    out += vertical(step, "#e8710a", " stroke-dasharray=\"3,2\"", "trend warning at step " + std::to_string(step));
  }
  if (frame.nonfinite_step) {
    out += vertical(*frame.nonfinite_step, "#d93025", "",
                    "first non-finite value at step " + std::to_string(*frame.nonfinite_step));
  }
  for (const Series& s : series()) {
    std::string points;
    for (const TrendPoint& p : trend.points) {
      auto v = s.value(p);
      if (!v || *v <= 0) continue;
      points += number(x(static_cast<double>(p.step + p.last_step) / 2)) + "," + number(y(*v)) + " ";
    }
    if (points.empty()) continue;
    out += std::string("<polyline fill=\"none\" stroke=\"") + s.colour + "\" stroke-width=\"" + number(s.width) +
           "\" points=\"" + points + "\"><title>" + s.name + "</title></polyline>\n";
  }
  return out + "</svg>";
}

std::string trendPlotLegend() {
  std::string out = "<div class=\"legend\">";
  for (const Series& s : series()) {
    out +=
        std::string("<span><span class=\"swatch\" style=\"background:") + s.colour + "\"></span>" + s.name + "</span>";
  }
  return out +
         "<span><span class=\"swatch\" style=\"background:#e8710a\"></span>trend warning</span>"
         "<span><span class=\"swatch\" style=\"background:#d93025\"></span>first non-finite value</span></div>\n";
}

}  // namespace nanprov::report
