#include "replay/verdict.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace nanprov::replay {
namespace {

struct Errors {
  double max = 0, mean = 0;
  int64_t nonfinite = 0;
};

// Max and mean |X − G| over positions where G is finite; X's own non-finite values are counted
// apart and left out of the errors.
Errors errorsOf(const std::vector<double>& x, const std::vector<double>& g) {
  Errors e;
  double sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < g.size() && i < x.size(); ++i) {
    if (!std::isfinite(g[i])) continue;
    if (!std::isfinite(x[i])) {
      ++e.nonfinite;
      continue;
    }
    double d = std::fabs(x[i] - g[i]);
    e.max = std::max(e.max, d);
    sum += d;
    ++n;
  }
  e.mean = n ? sum / static_cast<double>(n) : 0;
  return e;
}

std::string range(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

// Where the non-finite values are: the span of batches, heads and row tiles they fall in.
std::string locate(const Grid& grid, const std::vector<double>& b, const std::vector<double>& g) {
  int64_t lo[3] = {INT64_MAX, INT64_MAX, INT64_MAX}, hi[3] = {-1, -1, -1};
  for (int64_t i = 0; i < grid.size(); ++i) {
    if (!std::isfinite(g[i]) || std::isfinite(b[i])) continue;
    int64_t row = (i / grid.cols) % grid.rows;
    int64_t head = (i / (grid.cols * grid.rows)) % grid.heads;
    int64_t batch = i / (grid.cols * grid.rows * grid.heads);
    int64_t at[3] = {batch, head, row};
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], at[k]);
      hi[k] = std::max(hi[k], at[k]);
    }
  }
  if (hi[0] < 0) return "";
  return "batch " + range(lo[0], hi[0]) + ", head " + range(lo[1], hi[1]) + ", rows " + range(lo[2], hi[2]) +
         " (row tile " + range(lo[2] / kRowTile, hi[2] / kRowTile) + ")";
}

// The first region where B is exactly zero while G is not small there: the whole tensor, a
// (batch, head) slice or a row tile. Empty when there is none.
std::string zeroRegion(const Grid& grid, const std::vector<double>& b, const std::vector<double>& g, double floor) {
  auto zeroOver = [&](int64_t begin, int64_t end) {
    double gmax = 0;
    for (int64_t i = begin; i < end; ++i) {
      if (b[i] != 0.0) return false;
      if (std::isfinite(g[i])) gmax = std::max(gmax, std::fabs(g[i]));
    }
    return gmax > 10 * floor;
  };
  if (zeroOver(0, grid.size())) return "the whole tensor";
  int64_t slice = grid.rows * grid.cols;
  for (int64_t s = 0; s < grid.batch * grid.heads; ++s) {
    if (zeroOver(s * slice, (s + 1) * slice)) {
      return "batch " + std::to_string(s / grid.heads) + ", head " + std::to_string(s % grid.heads);
    }
  }
  for (int64_t s = 0; s < grid.batch * grid.heads; ++s) {
    for (int64_t r = 0; r < grid.rows; r += kRowTile) {
      int64_t end_row = std::min(grid.rows, r + kRowTile);
      if (zeroOver(s * slice + r * grid.cols, s * slice + end_row * grid.cols)) {
        return "batch " + std::to_string(s / grid.heads) + ", head " + std::to_string(s % grid.heads) + ", rows " +
               range(r, end_row - 1);
      }
    }
  }
  return "";
}

}  // namespace

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk: return "ok";
    case Verdict::kSuspect: return "suspect";
    case Verdict::kNonFinite: return "non-finite";
    case Verdict::kAllZero: return "all-zero";
    case Verdict::kSilentWrong: return "silent-wrong";
    case Verdict::kUnsupported: return "unsupported";
    case Verdict::kReferenceInvalid: return "reference-invalid";
  }
  return "?";
}

bool isFailure(Verdict v) {
  return v == Verdict::kNonFinite || v == Verdict::kAllZero || v == Verdict::kSilentWrong;
}

double okMultiplier(const std::string& role) { return role == "O" || role == "LSE" ? 2 : 3; }

double suspectMultiplier(const std::string& role) {
  static const std::map<std::string, double> m = {{"O", 4}, {"LSE", 4}, {"dV", 8}, {"dK", 25}, {"dQ", 180}};
  auto it = m.find(role);
  return it == m.end() ? 4 : it->second;
}

Comparison compare(const std::string& role, const Grid& grid, const std::vector<double>& b,
                   const std::vector<double>& g, const std::vector<double>& l, double floor) {
  Comparison c;
  c.role = role;
  c.floor = floor;
  Errors eb = errorsOf(b, g);
  c.nonfinite = eb.nonfinite;
  c.max_abs_err = eb.max;
  c.mean_abs_err = eb.mean;
  if (!l.empty()) {
    Errors el = errorsOf(l, g);
    c.yardstick_max_err = el.max;
    c.yardstick_mean_err = el.mean;
    c.yardstick_nonfinite = el.nonfinite;
  }
  double diff2 = 0, g2 = 0, b2 = 0, bg = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i]) || !std::isfinite(b[i])) continue;
    ++c.compared;
    diff2 += (b[i] - g[i]) * (b[i] - g[i]);
    g2 += g[i] * g[i];
    b2 += b[i] * b[i];
    bg += b[i] * g[i];
  }
  c.rel_l2 = g2 > 0 ? std::sqrt(diff2 / g2) : std::sqrt(diff2);
  c.cosine = g2 > 0 && b2 > 0 ? bg / std::sqrt(g2 * b2) : (g2 == b2 ? 1.0 : 0.0);

  if (c.nonfinite > 0) {  // rule 3
    c.verdict = Verdict::kNonFinite;
    c.nonfinite_where = locate(grid, b, g);
    return c;
  }
  c.all_zero_where = zeroRegion(grid, b, g, floor);
  if (!c.all_zero_where.empty()) {  // rule 4
    c.all_zero = true;
    c.verdict = Verdict::kAllZero;
    return c;
  }
  double el = c.yardstick_max_err;
  if (c.max_abs_err <= okMultiplier(role) * el + floor && c.mean_abs_err <= 1.5 * c.yardstick_mean_err + floor) {
    c.verdict = Verdict::kOk;  // rule 5
  } else if (c.max_abs_err <= suspectMultiplier(role) * el + floor && c.cosine >= 0.999) {
    c.verdict = Verdict::kSuspect;  // rule 6
  } else {
    c.verdict = Verdict::kSilentWrong;  // rule 7
  }
  return c;
}

}  // namespace nanprov::replay
