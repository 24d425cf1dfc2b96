#include <algorithm>
#include <cctype>
#include <cstdint>
#include <utility>

#include "cli/commands.h"

namespace nanprov::cli {
namespace {

bool allDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

CLI::Option* addRunArgument(CLI::App* cmd, std::vector<std::string>* runs) {
  return cmd
      ->add_option("run", *runs,
                   "Run directory (default: the newest under ./nanprov-runs); several directories of one "
                   "multi-node job (one per node) are read as one run")
      ->expected(0, -1);
}

CLI::Option* addJsonFlag(CLI::App* cmd, bool* json) { return cmd->add_flag("--json", *json, "Print JSON for scripts"); }

// Typed by people: " 3", "+3", "0x10" and "3.0" are typos that CLI11's own parsing would accept.
CLI::Validator wholeNumber() {
  return CLI::Validator(
      [](std::string& s) { return allDigits(s) ? std::string() : "'" + s + "' is not a whole number (digits only)"; },
      "N", "whole number");
}

// Turned into the byte count it says, or refused in one line: CLI11's own size parsing took
// "1.5M" and "1e99", and its words for "abc" and an overflow were its own.
CLI::Validator sizeValue() {
  return CLI::Validator(
      [](std::string& s) {
        const std::string refused =
            "'" + s + "' is not a size: give whole bytes, or a whole number with K, M or G (256K, 1G)";
        size_t digits = 0;
        while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
        std::string unit = s.substr(digits);
        std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
        int shift = -1;
        for (auto [name, bits] : {std::pair{"", 0},
                                  {"B", 0},
                                  {"K", 10},
                                  {"KB", 10},
                                  {"KIB", 10},
                                  {"M", 20},
                                  {"MB", 20},
                                  {"MIB", 20},
                                  {"G", 30},
                                  {"GB", 30},
                                  {"GIB", 30}}) {
          if (unit == name) shift = bits;
        }
        if (digits == 0 || shift < 0) return refused;
        // Past 2^50 bytes no size nanprov takes is meant: said as too large, never wrapped around.
        constexpr uint64_t kMost = uint64_t{1} << 50;
        uint64_t n = 0;
        for (size_t i = 0; i < digits; ++i) {
          n = n * 10 + static_cast<uint64_t>(s[i] - '0');
          if (n > kMost) return "'" + s + "' is too large a size (at most 1048576G)";
        }
        if (n > (kMost >> shift)) return "'" + s + "' is too large a size (at most 1048576G)";
        s = std::to_string(n << shift);
        return std::string();
      },
      "SIZE", "size");
}

CLI::Validator percentText() {
  return CLI::Validator(
      [](std::string& s) {
        size_t dot = s.find('.');
        bool ok = dot == std::string::npos ? allDigits(s) : allDigits(s.substr(0, dot)) && allDigits(s.substr(dot + 1));
        return ok ? std::string() : "'" + s + "' is not a percentage (digits, with at most one '.': 1, 0.5, 100)";
      },
      "PERCENT", "percentage");
}

}  // namespace nanprov::cli
