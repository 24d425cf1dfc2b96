// Strict number parsing for text that comes from outside nanprov's control: store meta values,
// file names, environment variables, capture headers. The whole text must be the number and it
// must fit the range asked for; anything else is "no number", never an exception (std::stoi
// throws) and never a bent value (atoi and strtoll clamp or stop early).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace nanprov {

inline std::optional<int64_t> parseInteger(std::string_view text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max) return std::nullopt;
  if (value == 0 && text.front() == '-') return std::nullopt;  // "-0" is a typo, not a rank
  return value;
}

// A finite decimal number ("1e-3", "0.125"); "nan", "inf" and trailing text are not.
inline std::optional<double> parseFiniteDouble(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace nanprov
