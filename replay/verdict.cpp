#include "replay/verdict.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <thread>

namespace nanprov::replay {
namespace {

// Splits [0, n) into fixed chunks, folds each into its own accumulator on a pool of threads,
// then merges them in chunk order: the result does not depend on the number of cores.
template <typename Acc, typename Fold, typename Merge>
Acc foldInChunks(int64_t n, Fold fold, Merge merge) {
  constexpr int64_t kChunk = int64_t{1} << 18;
  int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) {
    Acc acc;
    fold(acc, 0, n);
    return acc;
  }
  std::vector<Acc> partial(static_cast<size_t>(chunks));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) fold(partial[c], c * kChunk, std::min(n, (c + 1) * kChunk));
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

// Sums as they are folded; Errors once divided out.
struct ErrorSums {
  double max = 0, sum = 0;
  int64_t n = 0, nonfinite = 0;
  void merge(const ErrorSums& o) {
    max = std::max(max, o.max);
    sum += o.sum;
    n += o.n;
    nonfinite += o.nonfinite;
  }
  Errors errors() const { return {max, n ? sum / static_cast<double>(n) : 0, nonfinite}; }
};

// One pass over B and G for everything compare() needs but the fault locations.
struct Agreement {
  ErrorSums err;
  int64_t compared = 0;
  double diff2 = 0, g2 = 0, b2 = 0, bg = 0;
  void merge(const Agreement& o) {
    err.merge(o.err);
    compared += o.compared;
    diff2 += o.diff2;
    g2 += o.g2;
    b2 += o.b2;
    bg += o.bg;
  }
};

Agreement agreementOf(Values b, Values g) {
  int64_t n = static_cast<int64_t>(std::min(b.size(), g.size()));
  auto fold = [&](Agreement& a, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (!std::isfinite(g[i])) continue;
      if (!std::isfinite(b[i])) {
        ++a.err.nonfinite;
        continue;
      }
      double d = b[i] - g[i];
      a.err.max = std::max(a.err.max, std::fabs(d));
      a.err.sum += std::fabs(d);
      ++a.err.n;
      ++a.compared;
      a.diff2 += d * d;
      a.g2 += g[i] * g[i];
      a.b2 += b[i] * b[i];
      a.bg += b[i] * g[i];
    }
  };
  return foldInChunks<Agreement>(n, fold, [](Agreement& a, const Agreement& o) { a.merge(o); });
}

std::string range(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

// Where the non-finite values are: the span of batches, heads and row tiles they fall in.
std::string locate(const Grid& grid, Values b, Values g) {
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
std::string zeroRegion(const Grid& grid, Values b, Values g, double floor) {
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

RoleReference referenceOf(const std::string& role, const Grid& grid, Values g, Values l) {
  RoleReference ref{.role = role, .grid = grid, .g = g};
  if (!l.empty()) {
    ref.yardstick = agreementOf(l, g).err.errors();
    ref.has_yardstick = true;
  }
  return ref;
}

Comparison compare(const std::string& role, const Grid& grid, Values b, Values g, Values l, double floor) {
  return compare(referenceOf(role, grid, g, l), b, floor);
}

Comparison compare(const RoleReference& ref, Values b, double floor) {
  const std::string& role = ref.role;
  const Grid& grid = ref.grid;
  Values g = ref.g;
  Comparison c;
  c.role = role;
  c.floor = floor;
  Agreement a = agreementOf(b, g);
  Errors eb = a.err.errors();
  c.nonfinite = eb.nonfinite;
  c.max_abs_err = eb.max;
  c.mean_abs_err = eb.mean;
  if (ref.has_yardstick) {
    c.yardstick_max_err = ref.yardstick.max;
    c.yardstick_mean_err = ref.yardstick.mean;
    c.yardstick_nonfinite = ref.yardstick.nonfinite;
  }
  c.compared = a.compared;
  c.rel_l2 = a.g2 > 0 ? std::sqrt(a.diff2 / a.g2) : std::sqrt(a.diff2);
  c.cosine = a.g2 > 0 && a.b2 > 0 ? a.bg / std::sqrt(a.g2 * a.b2) : (a.g2 == a.b2 ? 1.0 : 0.0);

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
