#include "probes/core/injection.h"

#include <limits>
#include <optional>
#include <string_view>

#include "base/numbers.h"

namespace nanprov::probes {

StatusOr<InjectionSpec> parseInjection(const std::string& text) {
  InjectionSpec spec;
  spec.value = std::numeric_limits<double>::quiet_NaN();
  bool have_tensor = false;
  auto bad = [&](const std::string& why) {
    return Status::Error("bad --inject '" + text + "': " + why +
                         " (example: layer=3,phase=bwd,tensor=dQ,step=5,value=nan; values: nan, inf, -inf, zero, "
                         "scale:F)");
  };
  auto pairs = splitKeyValues(text);
  if (!pairs.ok()) return bad(pairs.status().message());
  for (const auto& [key, val] : *pairs) {
    bool ok = true;
    if (key == "tensor") {
      auto role = parseRole(val);
      ok = role.has_value();
      if (ok) spec.tensor = *role;
      have_tensor = ok;
    } else if (key == "value") {
      spec.corruption = Corruption::kFirstElement;
      if (val == "nan") spec.value = std::numeric_limits<double>::quiet_NaN();
      else if (val == "inf" || val == "+inf") spec.value = std::numeric_limits<double>::infinity();
      else if (val == "-inf") spec.value = -std::numeric_limits<double>::infinity();
      else if (val == "zero") spec.corruption = Corruption::kZero;
      else if (val.rfind("scale:", 0) == 0) {
        std::optional<double> factor = parseFiniteDouble(std::string_view(val).substr(6));
        ok = factor.has_value();
        spec.corruption = Corruption::kScale;
        spec.value = factor.value_or(1.0);
      } else {
        ok = false;
      }
    } else if (!readSelectorKey(&spec.where, key, val, &ok)) {
      return bad("unknown key '" + key + "'; keys are tensor, value, rank, layer, step, from-step, call, phase");
    }
    if (!ok) return bad("bad value for " + key + ": '" + val + "'");
  }
  if (!have_tensor) return bad("tensor= is required, one of O LSE dQ dK dV");
  bool fwd_out = isOutputRole(Phase::kForward, spec.tensor);
  bool bwd_out = isOutputRole(Phase::kBackward, spec.tensor);
  if (!fwd_out && !bwd_out)
    return bad(std::string(roleName(spec.tensor)) + " is an input; inject into O, LSE, dQ, dK or dV");
  Phase implied = fwd_out ? Phase::kForward : Phase::kBackward;
  if (spec.where.phase && *spec.where.phase != implied) {
    return bad(std::string(roleName(spec.tensor)) + " is not produced in phase " + phaseName(*spec.where.phase));
  }
  spec.where.phase = implied;
  return spec;
}

StatusOr<std::vector<InjectionSpec>> parseInjections(const std::string& text) {
  std::vector<InjectionSpec> specs;
  for (const std::string& one : splitList(text, ';')) {
    NANPROV_ASSIGN_OR_RETURN(auto spec, parseInjection(one));
    specs.push_back(spec);
  }
  return specs;
}

}  // namespace nanprov::probes
