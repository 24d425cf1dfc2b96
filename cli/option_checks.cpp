#include <algorithm>
#include <cctype>

#include "cli/commands.h"

namespace nanprov::cli {
namespace {

bool allDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

CLI::Option* addRunArgument(CLI::App* cmd, std::vector<std::string>* runs) {
  return cmd->add_option("run", *runs,
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

CLI::Validator sizeText() {
  return CLI::Validator(
      [](std::string& s) {
        size_t digits = 0;
        while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
        std::string unit = s.substr(digits);
        std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
        static const char* kUnits[] = {"", "K", "M", "G", "T", "KB", "MB", "GB", "TB", "KIB", "MIB", "GIB", "TIB", "B"};
        bool unit_ok = std::any_of(std::begin(kUnits), std::end(kUnits), [&](const char* u) { return unit == u; });
        return digits > 0 && unit_ok ? std::string() : "'" + s + "' is not a size (digits, then K, M or G)";
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
