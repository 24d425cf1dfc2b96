#include "report/unchecked_attention.h"

#include <algorithm>
#include <optional>

#include "base/attention_like.h"
#include "base/text.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

// The probes end a kind that some --probe-module would check with this (softmax_attention.cpp,
// module_trail.cpp): "...: not checked; --probe-module 'SPEC' checks it".
constexpr std::string_view kSuggestionStart = "; --probe-module '";
constexpr std::string_view kSuggestionEnd = "' checks it";

// The class of the modules at `pattern`, as the trail recorded it; none without --trail.
std::optional<std::string> classAt(const store::RunData& run, const std::string& pattern) {
  for (const store::RankInfo& r : run.ranks) {
    if (auto it = r.counters.module_class.find(pattern); it != r.counters.module_class.end()) return it->second;
  }
  return std::nullopt;
}

bool byPath(const std::string& spec) { return spec.find('.') != std::string::npos; }

// A SPEC's pattern, without its argument mapping ("SelfAttention:q=0,k=1,v=2").
std::string patternOf(const std::string& spec) { return spec.substr(0, spec.find(':')); }

}  // namespace

std::vector<UncheckedAttention> uncheckedAttention(const store::RunData& run) {
  std::vector<UncheckedAttention> out;
  for (const auto& [what, n] : run.unprobed()) {
    UncheckedAttention u{.what = what, .kind = what, .count = n};
    const size_t start = what.rfind(kSuggestionStart);
    if (start != std::string::npos && what.size() > kSuggestionEnd.size() &&
        what.compare(what.size() - kSuggestionEnd.size(), kSuggestionEnd.size(), kSuggestionEnd) == 0) {
      const size_t from = start + kSuggestionStart.size();
      u.probe_module = what.substr(from, what.size() - kSuggestionEnd.size() - from);
      u.kind = what.substr(0, start);
    }
    out.push_back(std::move(u));
  }
  return out;
}

bool isUncheckedAttention(const store::RunData& run, const ModuleCheckRecord& m) {
  for (const UncheckedAttention& u : uncheckedAttention(run)) {
    if (u.probe_module.empty()) continue;
    if (byPath(u.probe_module) ? matchesModulePattern(u.probe_module, m.module) : u.probe_module == m.module_class)
      return true;
  }
  return false;
}

std::vector<std::string> suggestedProbeModules(const store::RunData& run) {
  std::vector<std::string> specs;
  for (const UncheckedAttention& u : uncheckedAttention(run)) {
    if (!u.probe_module.empty() && std::find(specs.begin(), specs.end(), u.probe_module) == specs.end()) {
      specs.push_back(u.probe_module);
    }
  }
  // What the run was given, matched by pattern or by the class it covers, is never suggested
  // again, nor folded into a class: it ran, and these still went unchecked (the kinds say so).
  std::vector<std::string> given;
  for (const std::string& spec : run.settings.probe_modules) given.push_back(patternOf(spec));
  auto isGiven = [&](const std::string& s) { return std::find(given.begin(), given.end(), s) != given.end(); };
  std::erase_if(specs, [&](const std::string& spec) {
    const std::optional<std::string> cls = byPath(spec) ? classAt(run, spec) : spec;
    return isGiven(spec) || (cls && isGiven(*cls));
  });
  if (specs.empty()) return specs;
  // One class for them all: diffusers' six attention paths are one `Attention`.
  std::optional<std::string> one;
  bool single = true;
  for (const std::string& spec : specs) {
    std::optional<std::string> cls = byPath(spec) ? classAt(run, spec) : spec;
    if (!cls || (one && *one != *cls)) single = false;
    if (cls) one = cls;
  }
  if (single && one) specs = {*one};
  return specs;
}

std::string suggestionText(const std::vector<std::string>& specs) {
  if (specs.empty()) return "";
  std::string options;
  for (const std::string& spec : specs) options += " --probe-module " + shellWord(spec);
  return "nanprov run" + options + (specs.size() == 1 ? " checks it" : " checks them");
}

}  // namespace nanprov::report
