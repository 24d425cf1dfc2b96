#include "replay/verdict.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <thread>

namespace nanprov::replay {
namespace {

// Splits [0, n) into fixed chunks of `chunk`, folds each into its own accumulator on a pool of threads,
// then merges them in chunk order: the result does not depend on the number of cores.
template <typename Acc, typename Fold, typename Merge>
Acc foldInChunks(int64_t n, int64_t chunk, Fold fold, Merge merge) {
  int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks <= 1) {
    Acc acc;
    fold(acc, 0, n);
    return acc;
  }
  std::vector<Acc> partial(static_cast<size_t>(chunks));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) fold(partial[c], c * chunk, std::min(n, (c + 1) * chunk));
  };
  int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  Acc total;
  for (const Acc& p : partial) merge(total, p);
  return total;
}

// Sums as they are folded; Measures once divided out.
struct Sums {
  double max = 0, sum = 0, diff2 = 0, g2 = 0, b2 = 0, bg = 0;
  int64_t n = 0, nonfinite = 0;
  void merge(const Sums& o) {
    max = std::max(max, o.max);
    sum += o.sum;
    n += o.n;
    nonfinite += o.nonfinite;
    diff2 += o.diff2;
    g2 += o.g2;
    b2 += o.b2;
    bg += o.bg;
  }
};

std::string range(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

// Where the non-finite values are: the span of batches, heads and row tiles they fall in.
std::string locate(const Grid& grid, const Measures& m) {
  int64_t lo[3] = {INT64_MAX, INT64_MAX, INT64_MAX}, hi[3] = {-1, -1, -1};
  for (size_t i = 0; i < m.row_nonfinite.size(); ++i) {
    if (m.row_nonfinite[i] == 0) continue;
    const int64_t r = static_cast<int64_t>(i);
    int64_t at[3] = {r / (grid.rows * grid.heads), (r / grid.rows) % grid.heads, r % grid.rows};
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
std::string zeroRegion(const Grid& grid, const Measures& m, double floor) {
  auto zeroOver = [&](int64_t begin, int64_t end) {  // rows [begin, end)
    double gmax = 0;
    for (int64_t r = begin; r < end; ++r) {
      if (!m.row_b_zero[static_cast<size_t>(r)]) return false;
      gmax = std::max(gmax, m.row_g_max[static_cast<size_t>(r)]);
    }
    return gmax > 10 * floor;
  };
  const int64_t slices = grid.batch * grid.heads;
  if (zeroOver(0, slices * grid.rows)) return "the whole tensor";
  for (int64_t s = 0; s < slices; ++s) {
    if (zeroOver(s * grid.rows, (s + 1) * grid.rows)) {
      return "batch " + std::to_string(s / grid.heads) + ", head " + std::to_string(s % grid.heads);
    }
  }
  for (int64_t s = 0; s < slices; ++s) {
    for (int64_t r = 0; r < grid.rows; r += kRowTile) {
      int64_t end_row = std::min(grid.rows, r + kRowTile);
      if (zeroOver(s * grid.rows + r, s * grid.rows + end_row)) {
        return "batch " + std::to_string(s / grid.heads) + ", head " + std::to_string(s % grid.heads) + ", rows " +
               range(r, end_row - 1);
      }
    }
  }
  return "";
}

}  // namespace

Measures measure(const Grid& grid, Values b, Values g) {
  const int64_t cols = std::max<int64_t>(1, grid.cols);
  const int64_t rows = std::min<int64_t>(static_cast<int64_t>(std::min(b.size(), g.size())), grid.size()) / cols;
  Measures m;
  m.row_nonfinite.assign(static_cast<size_t>(rows), 0);
  m.row_b_zero.assign(static_cast<size_t>(rows), 0);
  m.row_g_max.assign(static_cast<size_t>(rows), 0.0);
  // Each row is written by the one chunk that folds it; the sums merge in chunk order.
  auto fold = [&](Sums& a, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t nonfinite = 0;
      bool b_zero = true;
      double g_max = 0;
      for (int64_t i = r * cols; i < (r + 1) * cols; ++i) {
        b_zero = b_zero && b[i] == 0.0;
        if (!std::isfinite(g[i])) continue;
        g_max = std::max(g_max, std::fabs(g[i]));
        if (!std::isfinite(b[i])) {
          ++nonfinite;
          continue;
        }
        double d = b[i] - g[i];
        a.max = std::max(a.max, std::fabs(d));
        a.sum += std::fabs(d);
        ++a.n;
        a.diff2 += d * d;
        a.g2 += g[i] * g[i];
        a.b2 += b[i] * b[i];
        a.bg += b[i] * g[i];
      }
      a.nonfinite += nonfinite;
      m.row_nonfinite[static_cast<size_t>(r)] = nonfinite;
      m.row_b_zero[static_cast<size_t>(r)] = b_zero;
      m.row_g_max[static_cast<size_t>(r)] = g_max;
    }
  };
  Sums s = foldInChunks<Sums>(rows, std::max<int64_t>(1, (int64_t{1} << 18) / cols), fold,
                              [](Sums& a, const Sums& o) { a.merge(o); });
  m.err = {s.max, s.n ? s.sum / static_cast<double>(s.n) : 0, s.nonfinite};
  m.compared = s.n;
  m.diff2 = s.diff2;
  m.g2 = s.g2;
  m.b2 = s.b2;
  m.bg = s.bg;
  return m;
}

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

bool isFailure(Verdict v) { return v == Verdict::kNonFinite || v == Verdict::kAllZero || v == Verdict::kSilentWrong; }

double okMultiplier(const std::string& role) { return role == "O" || role == "LSE" ? 2 : 3; }

double suspectMultiplier(const std::string& role) {
  static const std::map<std::string, double> m = {{"O", 4}, {"LSE", 4}, {"dV", 8}, {"dK", 25}, {"dQ", 180}};
  auto it = m.find(role);
  return it == m.end() ? 4 : it->second;
}

double relL2(const Measures& m) { return m.g2 > 0 ? std::sqrt(m.diff2 / m.g2) : std::sqrt(m.diff2); }

RoleReference referenceOf(const std::string& role, const Grid& grid, Values g, Values l) {
  RoleReference ref{.role = role, .grid = grid, .g = g};
  if (!l.empty()) {
    const Measures m = measure(grid, l, g);
    ref.yardstick = m.err;
    ref.yardstick_rel_l2 = relL2(m);
    ref.has_yardstick = true;
  }
  return ref;
}

Comparison compare(const std::string& role, const Grid& grid, Values b, Values g, Values l, double floor) {
  return compare(referenceOf(role, grid, g, l), b, floor);
}

Comparison compare(const RoleReference& ref, Values b, double floor) {
  return judge(ref, measure(ref.grid, b, ref.g), floor);
}

Comparison judge(const RoleReference& ref, const Measures& m, double floor) {
  const std::string& role = ref.role;
  Comparison c;
  c.role = role;
  c.floor = floor;
  c.nonfinite = m.err.nonfinite;
  c.max_abs_err = m.err.max;
  c.mean_abs_err = m.err.mean;
  if (ref.has_yardstick) {
    c.yardstick_max_err = ref.yardstick.max;
    c.yardstick_mean_err = ref.yardstick.mean;
    c.yardstick_nonfinite = ref.yardstick.nonfinite;
    c.yardstick_rel_l2 = ref.yardstick_rel_l2;
  }
  c.compared = m.compared;
  c.rel_l2 = relL2(m);
  c.cosine = m.g2 > 0 && m.b2 > 0 ? m.bg / std::sqrt(m.g2 * m.b2) : (m.g2 == m.b2 ? 1.0 : 0.0);

  if (c.nonfinite > 0) {  // rule 3
    c.verdict = Verdict::kNonFinite;
    c.nonfinite_where = locate(ref.grid, m);
    return c;
  }
  c.all_zero_where = zeroRegion(ref.grid, m, floor);
  if (!c.all_zero_where.empty()) {  // rule 4
    c.all_zero = true;
    c.verdict = Verdict::kAllZero;
    return c;
  }
  // The yardstick's error counts as at least the floor: a yardstick that lands on G exactly (as
  // it can for tiny gradients) must not make the bound tighter than the dtype's own rounding.
  const double el = std::max(c.yardstick_max_err, floor);
  if (c.max_abs_err <= okMultiplier(role) * el + floor && c.mean_abs_err <= 1.5 * c.yardstick_mean_err + floor) {
    c.verdict = Verdict::kOk;  // rule 5
  } else if (c.max_abs_err <= suspectMultiplier(role) * el + floor &&
             (c.cosine >= 0.999 ||
              (c.yardstick_rel_l2 >= kUnresolvedRelL2 && c.rel_l2 <= okMultiplier(role) * c.yardstick_rel_l2))) {
    c.verdict = Verdict::kSuspect;  // rule 6
  } else {
    c.verdict = Verdict::kSilentWrong;  // rule 7
  }
  return c;
}

}  // namespace nanprov::replay
