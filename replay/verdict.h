// Verdicts: how one output of one backend compares with the float64 reference G, judged against
// the yardstick L (the same attention in the input's precision with the operations reordered),
// with the rules of DESIGN.md "Verdict rules", which follow the tests of FlashAttention, PyTorch,
// TransformerEngine and cudnn-frontend. Plain C++ over float64 arrays: no LibTorch.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nanprov::replay {

enum class Verdict { kOk, kSuspect, kNonFinite, kAllZero, kSilentWrong, kUnsupported, kReferenceInvalid };
const char* verdictName(Verdict v);  // "ok", "suspect", "non-finite", ...
// Non-finite, all-zero and silent-wrong: the backend got this tensor wrong.
bool isFailure(Verdict v);

// A dense tensor read as [batch, heads, rows, cols]; LSE has one column.
struct Grid {
  int64_t batch = 1, heads = 1, rows = 1, cols = 1;
  int64_t size() const { return batch * heads * rows * cols; }
};

// Rows are grouped in tiles of this many when locating faults: the row blocks kernels work in.
inline constexpr int64_t kRowTile = 64;

// Error multipliers over the yardstick. Rule 5 (ok): DESIGN.md. Rule 6 (suspect): PyTorch's own
// looser bounds in test/test_transformers.py.
double okMultiplier(const std::string& role);       // O, LSE 2; dQ, dK, dV 3
double suspectMultiplier(const std::string& role);  // O 4, LSE 4, dV 8, dK 25, dQ 180

struct Comparison {
  std::string role;
  Verdict verdict = Verdict::kOk;
  int64_t nonfinite = 0;        // NaN/Inf in B where G is finite
  std::string nonfinite_where;  // "batch 0-1, head 0-3, row tile 0 (rows 0-63)"
  bool all_zero = false;        // B exactly 0 over the tensor, a (batch, head) or a row tile
  std::string all_zero_where;
  double max_abs_err = 0, mean_abs_err = 0, rel_l2 = 0, cosine = 1;
  double yardstick_max_err = 0, yardstick_mean_err = 0, yardstick_rel_l2 = 0;
  int64_t yardstick_nonfinite = 0;
  double floor = 0;      // about one ulp of the dtype near max|G|
  int64_t compared = 0;  // positions where G is finite
};

// A tensor's values, dense [batch, heads, rows, cols] float64, owned elsewhere.
using Values = std::span<const double>;

// Max and mean |X − G| over the positions where G is finite; X's own non-finite values there
// are counted apart and left out of the errors.
struct Errors {
  double max = 0, mean = 0;
  int64_t nonfinite = 0;
};

// What one pass over B and G measures, everything the rules decide from. Worked out on the host
// here (measure) or by LibTorch where B and G already are (replay/tensor_measures.h): the same
// counts, locations and maxima, and sums equal to rounding.
struct Measures {
  Errors err;            // over the positions where G is finite
  int64_t compared = 0;  // positions where both are finite
  double diff2 = 0, g2 = 0, b2 = 0, bg = 0;
  // One entry per row of the grid, (batch, head, row) in order: the fault locations come from these.
  std::vector<int64_t> row_nonfinite;  // B non-finite where G is finite
  std::vector<uint8_t> row_b_zero;     // B exactly 0 along the whole row
  std::vector<double> row_g_max;       // largest finite |G| of the row (0 when none)
};
// On the host, on every core in fixed chunks: the result does not depend on the core count.
Measures measure(const Grid& grid, Values b, Values g);

// The reference side of one tensor's comparisons: G, and the yardstick's errors against it,
// worked out once for every backend judged against them.
struct RoleReference {
  std::string role;
  Grid grid;
  Values g;  // host float64; empty when G stays on the device
  Errors yardstick;
  // The yardstick's relative L2 error against G. Where even the yardstick is this far off
  // (≥ kUnresolvedRelL2: its cosine would be below 0.999), G's direction is below what the dtype
  // resolves, as for a gradient that nearly cancels: cosine cannot tell a fault from rounding
  // there, and rule 6 compares B's relative L2 error with the yardstick's instead.
  double yardstick_rel_l2 = 0;
  bool has_yardstick = false;
};
inline constexpr double kUnresolvedRelL2 = 0.045;
// ‖B−G‖/‖G‖ (‖B−G‖ where G is all zero).
double relL2(const Measures& m);
RoleReference referenceOf(const std::string& role, const Grid& grid, Values g, Values l);  // l may be empty

// Applies rules 3 to 7 to what was measured. `floor` is 2·max|fl(G+c)−c−G| in B's dtype, with
// c = 0.3·max|G| (about one ulp near max|G|, at any scale).
Comparison judge(const RoleReference& ref, const Measures& m, double floor);
// measure and judge, on the host.
Comparison compare(const RoleReference& ref, Values b, double floor);
// The same for one comparison (L may be empty).
Comparison compare(const std::string& role, const Grid& grid, Values b, Values g, Values l, double floor);

}  // namespace nanprov::replay
