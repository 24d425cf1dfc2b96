#include "report/first_module.h"

#include <tuple>

#include "base/text.h"
#include "report/run_overview.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

// `outer` is `inner` or a module around it ("" is the outermost module, around everything).
bool encloses(const std::string& outer, const std::string& inner) {
  return outer.empty() || inner == outer || (inner.rfind(outer + ".", 0) == 0);
}

std::string moduleName(const ModuleCheckRecord& m) {
  const std::string cls = printable(m.module_class);
  return m.module.empty() ? "the outermost module (" + cls + ")" : printable(m.module) + " (" + cls + ")";
}

// What the module was handed, in words; only inputs seen whole and finite are "finite inputs".
std::string forwardInputsText(ModuleInputs inputs, const std::string& largest) {
  switch (inputs) {
    case ModuleInputs::kFinite: return ", from finite inputs" + largest;
    case ModuleInputs::kNonFinite:
      return ", whose inputs were already non-finite: they came from outside any module (the batch, or code between "
             "modules)";
    case ModuleInputs::kNone:
      return ", which received no tensor: it made them from its own parameters or state, or from values it did not "
             "receive as arguments";
    case ModuleInputs::kPartlySeen:
      return ", from inputs --trail could not see whole (objects it does not look into, or more than it walks); those "
             "seen were finite" +
             largest;
  }
  return "";
}

std::string backwardInputsText(ModuleInputs inputs, const std::string& largest) {
  switch (inputs) {
    case ModuleInputs::kFinite: return ", from finite incoming gradients" + largest;
    case ModuleInputs::kNonFinite:
      return ", whose incoming gradients were already non-finite: they came from outside any module (the loss, or code "
             "between modules)";
    case ModuleInputs::kNone:
    case ModuleInputs::kPartlySeen: return ", with no incoming gradient --trail could see";
  }
  return "";
}

// See FirstModule::shares_gradient_with.
std::vector<std::string> sharingItsGradient(const store::RunData& run, const ModuleCheckRecord& m) {
  std::vector<std::string> out;
  if (m.phase != Phase::kBackward || m.gradient == 0) return out;
  for (const ModuleCheckRecord& o : run.module_checks) {
    if (o.rank != m.rank || o.step != m.step || o.phase != m.phase || o.gradient != m.gradient || !o.inputsFinite())
      continue;
    if (encloses(o.module, m.module) || encloses(m.module, o.module)) continue;
    out.push_back(o.module);
  }
  return out;
}

// The module check firstModule names (report/first_module.h).
std::optional<ModuleCheckRecord> firstCheck(const store::RunData& run, const Findings& findings) {
  // The first step and phase with a non-finite module output. A step's backward runs after its
  // forward, and a backward fed by a non-finite forward sends non-finite gradients from finite
  // incoming ones (a loss module's: its gradient is 1.0): had the forward any non-finite output,
  // that is where the values were made, or where they came in with the data.
  auto when = [](const ModuleCheckRecord& m) { return std::pair(m.step, m.phase == Phase::kBackward); };
  const ModuleCheckRecord* first = nullptr;   // the earliest call of that step and phase
  const ModuleCheckRecord* source = nullptr;  // the earliest with finite inputs in it
  auto key = [](const ModuleCheckRecord& m) { return std::tie(m.step, m.time_ns, m.rank, m.order); };
  for (const ModuleCheckRecord& m : run.module_checks) {
    if (!first || when(m) < when(*first)) {
      first = &m;
      source = m.inputsFinite() ? &m : nullptr;
      continue;
    }
    if (when(m) > when(*first)) continue;
    if (key(m) < key(*first)) first = &m;
    if (m.inputsFinite() && (!source || key(m) < key(*source))) source = &m;
  }
  const ModuleCheckRecord* chosen = source ? source : first;
  if (!chosen) return std::nullopt;
  if (findings.first) {
    const CallRecord& edge = run.calls[*findings.first];
    // A module that ran after the first edge did not make what reached it: its own origin went
    // unchecked (a compiled backward) and the module is only where it spread to. Within the edge's
    // step and phase on its own rank, the clock tells (one process's wall clock). A module's time
    // is when its check was taken, after it ran, so a module around the attention call always
    // reads later: it is judged by the rules below instead (code inside it that is not a module,
    // such as a rotary embedding, may have made the value before attention ran).
    const bool same_phase = chosen->step == edge.step && chosen->phase == edge.phase;
    const bool ran_after = same_phase && chosen->rank == edge.rank && edge.start_ns > 0 &&
                           chosen->time_ns > edge.start_ns && !encloses(chosen->module, edge.module);
    const bool later =
        chosen->step > edge.step ||
        (chosen->step == edge.step && chosen->phase == Phase::kBackward && edge.phase == Phase::kForward) || ran_after;
    if (later) return std::nullopt;
    // Attention made it: the module is the attention module or one around it.
    if (findings.origin == Origin::kAttention && chosen->step == edge.step && encloses(chosen->module, edge.module)) {
      return std::nullopt;
    }
  }
  return *chosen;
}

}  // namespace

std::optional<FirstModule> firstModule(const store::RunData& run, const Findings& findings) {
  std::optional<ModuleCheckRecord> check = firstCheck(run, findings);
  if (!check) return std::nullopt;
  return FirstModule{.check = *check, .shares_gradient_with = sharingItsGradient(run, *check)};
}

nlohmann::json firstModuleJson(const std::optional<FirstModule>& first) {
  if (!first) return nullptr;
  const ModuleCheckRecord& m = first->check;
  return {{"rank", m.rank},
          {"step", m.step},
          {"phase", phaseName(m.phase)},
          {"module", m.module},
          {"class", m.module_class},
          {"inputs_finite", m.inputsFinite()},
          {"inputs", moduleInputsName(m.inputs)},
          {"nonfinite", m.nonfinite()},
          {"largest_input", m.largest_input},
          {"shares_gradient_with", first->shares_gradient_with},
          {"unchecked_before", m.unchecked_before}};
}

namespace {

// Compiled code is checked only where Inductor writes values anyway (compiled_trail.py): what ran
// unchecked between the values a check read as its inputs (`read`) and the module, or "".
std::string uncheckedBeforeText(const ModuleCheckRecord& m, const std::string& read) {
  if (m.unchecked_before.empty()) return "";
  std::vector<std::string> shown;
  // Nearest first; "..." last where the bootstrap's walk upstream stopped at its limit.
  std::vector<std::string> modules = m.unchecked_before;
  const bool further = !modules.empty() && modules.back() == "...";
  if (further) modules.pop_back();
  for (size_t i = 0; i < modules.size() && i < 4; ++i) shown.push_back(printable(modules[i]));
  if (modules.size() > shown.size()) shown.push_back("and " + std::to_string(modules.size() - shown.size()) + " more");
  if (further) shown.push_back("code further upstream");
  return "; in compiled code, " + joined(shown, ", ") + " ran unchecked between those " + read +
         " and it, and may have made it";
}

}  // namespace

std::string firstModuleText(const FirstModule& first, StepUnit unit, bool at) {
  const ModuleCheckRecord& m = first.check;
  const std::string when = at ? " at " + stepLabel(unit, m.step) + " " + phaseName(m.phase) : "";
  const std::string largest = " (largest |x| " + shortNumber(m.largest_input) + ")";
  if (m.phase == Phase::kForward) {
    return "the output of " + moduleName(m) + when + forwardInputsText(m.inputs, largest) +
           uncheckedBeforeText(m, "inputs");
  }
  std::string text = "the gradient that the backward of " + moduleName(m) + " sent to its input" + when +
                     backwardInputsText(m.inputs, largest) + uncheckedBeforeText(m, "gradients");
  if (std::vector<std::string> shared = first.shares_gradient_with; !shared.empty()) {
    for (std::string& s : shared) s = printable(s);
    text += "; that input also feeds " + joined(shared, ", ") +
            ", whose gradients add up there: any of them may have made it";
  }
  return text;
}

std::string madeInUncheckedAttentionText(const FirstModule& first, StepUnit unit) {
  const ModuleCheckRecord& m = first.check;
  const std::string where = m.phase == Phase::kForward ? "inside " : "inside the backward of ";
  return "the first non-finite values were made " + where + moduleName(m) + " at " + stepLabel(unit, m.step) + " " +
         phaseName(m.phase) + ", from finite " + (m.phase == Phase::kForward ? "inputs" : "incoming gradients") +
         " (largest |x| " + shortNumber(m.largest_input) +
         "): unchecked attention, so the kernel that made them is not known";
}

bool trailMissedCompiledCode(const store::RunData& run) {
  for (const store::RankInfo& r : run.ranks) {
    // A compiled graph ran; its modules' backward was checked only where every backward graph
    // took the checks (a store from before those checks says nothing of it).
    if (r.counters.trail_compiled && r.counters.trail_compiled_backward != CompiledBackward::kChecked) return true;
  }
  return false;
}

std::string upstreamOriginText(const RunOverview& run, const std::optional<FirstModule>& m, const CallRecord& edge) {
  if (m)
    return "the first non-finite value was " +
           firstModuleText(*m, run.step_unit, m->check.step != edge.step || m->check.phase != edge.phase);
  if (!run.trail_on) return "the origin is outside attention (nanprov run --trail names the module that made it)";
  if (run.trail_missed_compiled_code) {
    return "the origin is outside attention (--trail could not name the module: the modules' backward inside some "
           "torch.compile'd code was not checked, such as a graph compiled once and run for several modules)";
  }
  return "the origin is outside attention, and no module's output was non-finite before it";
}

}  // namespace nanprov::report
